"""The app-side index in LlamaIndex (``search=AppIndexSearch(...)``) on Qdrant local mode: the store ranks nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import SealedEmbedding, SealedVectorStore, sealed_storage_context
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.core import ModeMismatchError
from textcrafter_rag.sealing import Sealer, generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import NOTE_IDS, NOTES, FakeBase, cosine, exact_top

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

TEXTS, IDS = NOTES, NOTE_IDS


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def _index(base: FakeBase, client: QdrantClient, key: str, index_path: Path) -> VectorStoreIndex:
    embed = SealedEmbedding(base=base)
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(client=client, collection_name="notes"),
        key=key,
        search=AppIndexSearch(open_k=20, index_path=index_path),
        embed_model=embed,
    )
    nodes = [TextNode(id_=i, text=t) for i, t in zip(IDS, TEXTS)]
    return VectorStoreIndex(nodes, storage_context=ctx, embed_model=embed)


def test_the_app_ranks_the_store_holds_keyed_random_vectors_and_a_new_process_reads_the_index(
    base: FakeBase, tmp_path: Path
) -> None:
    key = generate_key()
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    index = _index(base, client, key, tmp_path / "notes.tcidx")
    hits = index.as_retriever(similarity_top_k=4).retrieve("who was treated at ward 3?")
    assert [h.node.get_content() for h in hits] == exact_top(base, "who was treated at ward 3?", 4)
    points, _ = client.scroll("notes", limit=100, with_vectors=True, with_payload=True)
    rows = [p for p in points if "_tc_marker" not in p.payload]
    assert len(rows) == len(TEXTS) and all(p.payload["_tc_mode"] == "index" for p in rows)
    sids = index.vector_store.store_ids(IDS)  # the store holds keyed ids only
    for p in rows:
        assert Sealer.is_sealed(p.payload["_tc_vec"])
        assert abs(cosine(p.vector, base.doc(TEXTS[sids.index(str(p.id))]))) < 0.7  # random, unrelated
    index.vector_store.delete_nodes([IDS[3]])
    assert TEXTS[3] not in [h.node.get_content() for h in index.as_retriever(similarity_top_k=4).retrieve(TEXTS[3])]
    client.close()
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    reopened = SealedVectorStore(
        QdrantVectorStore(client=client, collection_name="notes"),
        key=key,
        search=AppIndexSearch(open_k=20, index_path=tmp_path / "notes.tcidx"),
    )
    result = reopened.query(VectorStoreQuery(query_embedding=base.query("condition 4"), similarity_top_k=3))
    assert [n.get_content() for n in result.nodes] == [t for t in exact_top(base, "condition 4", 4) if t != TEXTS[3]][
        :3
    ]
    with pytest.raises(ModeMismatchError, match="'index' mode"):
        SealedVectorStore(QdrantVectorStore(client=client, collection_name="notes"), key=key, fetch_k=30).query(
            VectorStoreQuery(query_embedding=base.query("q"), similarity_top_k=1)
        )
    with pytest.raises(ValueError, match="passes nothing to the store"):
        reopened.query(VectorStoreQuery(query_embedding=base.query("q"), similarity_top_k=1), qdrant_filters=None)
    client.close()
