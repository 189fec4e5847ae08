"""Two-stage sealed search in LlamaIndex, end to end on Qdrant (local mode): store, query, retriever."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore, VectorStoreQuery
from llama_index.core.vector_stores.types import VectorStoreQueryMode

from llama_index.embeddings.textcrafter import SealedVectorStore, sealed_storage_context
from textcrafter_rag.sealing import Sealer, SealError, generate_key
from textcrafter_rag.testing import KnownVectors, scan_for_plaintext

from ._llama_textcrafter_fakes import NOTE_IDS, NOTES, FakeBase, cosine, exact_top

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models

TEXTS, IDS = NOTES, NOTE_IDS


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def _index(base: FakeBase, path: Path, key: str, fetch_k: int = 25) -> tuple[VectorStoreIndex, QdrantClient]:
    client = QdrantClient(path=str(path / "qdrant"))
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(client=client, collection_name="notes"), key=key, fetch_k=fetch_k
    )
    nodes = [TextNode(id_=i, text=t) for i, t in zip(IDS, TEXTS)]  # no metadata: embedded as the text alone
    return VectorStoreIndex(nodes, storage_context=ctx, embed_model=base), client


def test_qdrant_holds_candidates_and_sealed_vectors_and_the_retriever_ranks_exactly(base, tmp_path) -> None:
    index, client = _index(base, tmp_path, generate_key())
    points, _ = client.scroll("notes", limit=100, with_vectors=True, with_payload=True)
    markers = [p for p in points if "_tc_marker" in p.payload]  # the store's mode, sealed, under a keyed id
    assert [p.payload["_tc_marker"] for p in markers] == ["candidates"]
    points = [p for p in points if "_tc_marker" not in p.payload]
    assert len(points) == len(TEXTS) and all(p.payload["_tc_mode"] == "candidates" for p in points)
    sids = index.vector_store.store_ids(IDS)  # the store holds keyed ids only
    for point in points:
        text = TEXTS[sids.index(str(point.id))]
        assert Sealer.is_sealed(point.payload["_tc_vec"])
        assert cosine(point.vector, base.doc(text)) < 0.95  # the store never got the clean vector
    retriever = index.as_retriever(similarity_top_k=4)
    hits = retriever.retrieve("who was treated at ward 3?")
    assert [h.node.get_content() for h in hits] == exact_top(base, "who was treated at ward 3?", 4)
    q = base.query("who was treated at ward 3?")
    for hit in hits:
        assert hit.score == pytest.approx(cosine(q, base.doc(hit.node.get_content())), abs=2e-3)
    client.close()
    assert scan_for_plaintext([tmp_path], ["Patient 3 was", "treated for condition"]) == []


def test_query_modes_async_and_refusals(base, tmp_path) -> None:
    key = generate_key()
    index, client = _index(base, tmp_path, key, fetch_k=25)
    store = index.vector_store
    assert isinstance(store, SealedVectorStore) and store.search_options.fetch_k == 25
    with pytest.warns(DeprecationWarning, match="search_options"):
        assert store.two_stage == store.search_options  # the old name, warned
    q = base.query("q")
    mmr = store.query(VectorStoreQuery(query_embedding=q, similarity_top_k=3, mode=VectorStoreQueryMode.MMR))
    assert len(mmr.nodes) == 3
    with pytest.raises(ValueError, match="exceeds this store's open_k"):
        store.query(VectorStoreQuery(query_embedding=q, similarity_top_k=26))
    with pytest.raises(SealError):  # another key opens no candidate
        SealedVectorStore(store.store, key=generate_key(), fetch_k=24).query(
            VectorStoreQuery(query_embedding=q, similarity_top_k=1)
        )
    with pytest.raises(ValueError, match="keeps only vectors"):
        SealedVectorStore(SimpleVectorStore(), key=key, fetch_k=10)
    client.close()


async def test_async_index_and_retriever(base, tmp_path) -> None:
    aclient = AsyncQdrantClient(path=str(tmp_path / "qdrant"))  # local mode: one client per directory
    await aclient.create_collection(
        "notes", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE)
    )
    inner = QdrantVectorStore(aclient=aclient, collection_name="notes")
    ctx = sealed_storage_context(vector_store=inner, key=generate_key(), fetch_k=25)  # 24 notes and the marker
    index = VectorStoreIndex([], storage_context=ctx, embed_model=base, use_async=True)
    await index.ainsert_nodes([TextNode(id_=i, text=t) for i, t in zip(IDS, TEXTS)])
    hits = await index.as_retriever(similarity_top_k=3).aretrieve("q")
    assert [h.node.get_content() for h in hits] == exact_top(base, "q", 3)
    await aclient.close()
