"""The store-held index's replica in LlamaIndex (``StoreIndexSearch(replica=True)``): a query reads no shell by id
(only the log's heads search and probes, the same whatever the query), sync and async; another worker's writes
and deletes are seen at the next search. Qdrant in memory; every ``get_nodes`` the store answers is recorded."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import VectorStoreQuery
from llama_index.core.vector_stores.types import VectorStoreQueryMode

from llama_index.embeddings.textcrafter import SealedVectorStore
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.layout import MARKER_KEY
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.store_index import EXACT_EXTRA
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import NOTE_IDS, NOTES, FakeBase, exact_top

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

pytestmark = pytest.mark.filterwarnings("ignore::llama_index.embeddings.textcrafter.ReportedVectorsWarning")

TEXTS, IDS = NOTES, NOTE_IDS


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def _nodes(base: FakeBase, rows: range | list[int]) -> list[TextNode]:
    out = []
    for i in rows:
        node = TextNode(id_=IDS[i], text=TEXTS[i], embedding=base.doc(TEXTS[i]))
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{i // 3}")
        out.append(node)
    return out


def _worker(client: QdrantClient, key: str, *, replica: bool) -> SealedVectorStore:
    options = StoreIndexSearch(open_k=20, replica=replica)
    return SealedVectorStore(QdrantVectorStore(client=client, collection_name="notes"), key=key, search=options)


def _query(base: FakeBase, text: str, k: int) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=base.query(text), similarity_top_k=k)


def _texts(result: Any) -> list[str]:
    return [n.get_content() for n in result.nodes]


class Reads:
    """Every id the wrapped store was asked for by ``get_nodes`` / ``aget_nodes`` or its client's ``retrieve``
    (the store's view)."""

    def __init__(self, client: QdrantClient) -> None:
        self.client, self.ids = client, []
        real, areal, retrieve = QdrantVectorStore.get_nodes, QdrantVectorStore.aget_nodes, client.retrieve

        def retrieved(*args: Any, ids: Any = (), **kw: Any) -> Any:
            self.ids += [str(i) for i in ids]
            return retrieve(*args, ids=ids, **kw)

        def get_nodes(store: Any, node_ids: Any = None, filters: Any = None, **kw: Any) -> Any:
            self.ids += [str(i) for i in node_ids or ()]
            return real(store, node_ids=node_ids, filters=filters, **kw)

        async def aget_nodes(store: Any, node_ids: Any = None, filters: Any = None, **kw: Any) -> Any:
            self.ids += [str(i) for i in node_ids or ()]
            return await areal(store, node_ids=node_ids, filters=filters, **kw)

        self.patches = [
            mock.patch.object(QdrantVectorStore, "get_nodes", get_nodes),
            mock.patch.object(QdrantVectorStore, "aget_nodes", aget_nodes),
            mock.patch.object(client, "retrieve", retrieved),
        ]

    def __enter__(self) -> Reads:
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.patches:
            p.stop()

    def data_ids(self) -> set[str]:
        points = self.client.scroll("notes", limit=1000, with_payload=True)[0]
        return {str(p.id) for p in points if not {LOG_FIELD, MARKER_KEY} & set(p.payload or {})}

    def data_reads(self) -> list[str]:
        data = self.data_ids()
        return [i for i in self.ids if i in data]


def test_with_the_replica_a_query_reads_no_shell_sync_and_async(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    _worker(client, key, replica=False).add(_nodes(base, range(24)))
    reader = _worker(client, key, replica=True)
    with Reads(client) as reads:
        reader.query(_query(base, "warm-up", 1))  # the open: every shell read once
        assert sorted(set(reads.data_reads())) == sorted(reads.data_ids())
        seen = []
        for q in ("who was treated at ward 3?", "condition 5", "patient 7"):
            reads.ids.clear()
            assert _texts(reader.query(_query(base, q, 4))) == exact_top(base, q, 4)
            assert reads.data_reads() == []
            seen.append(list(reads.ids))
        reads.ids.clear()
        result = asyncio.run(reader.aquery(_query(base, "condition 5", 4)))
        assert _texts(result) == exact_top(base, "condition 5", 4)
        assert reads.data_reads() == []
    assert seen[0] == seen[1] == seen[2]


def test_without_the_replica_a_query_reads_its_shells(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key, replica=False)
    store.add(_nodes(base, range(24)))
    with Reads(client) as reads:
        store.query(_query(base, "condition 5", 4))
        assert len(reads.data_reads()) == 4 + EXACT_EXTRA  # by id (the index is exact): what the replica hides


def test_an_mmr_query_and_one_naming_doc_ids_read_the_whole_pick(base) -> None:
    """MMR ranks every shell read and ``doc_ids`` keep some of them: both need the index's ``open_k``, not k + 8."""
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key, replica=False)
    store.add(_nodes(base, range(24)))
    mmr = VectorStoreQuery(query_embedding=base.query("condition 5"), similarity_top_k=4, mode=VectorStoreQueryMode.MMR)
    docs = VectorStoreQuery(query_embedding=base.query("condition 5"), similarity_top_k=4, doc_ids=["doc-1", "doc-5"])
    for query in (mmr, docs):
        with Reads(client) as reads:
            assert store.query(query).nodes
            assert len(reads.data_reads()) == 20  # open_k


def test_another_workers_writes_and_deletes_reach_the_replica_at_the_next_search(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    reader = _worker(client, key, replica=True)
    reader.add(_nodes(base, range(12)))  # its own writes reach its replica too
    q = "who was treated at ward 3?"
    assert _texts(reader.query(_query(base, q, 3))) == [t for t in exact_top(base, q, 24) if t in TEXTS[:12]][:3]
    other = _worker(client, key, replica=False)
    other.add(_nodes(base, range(12, 24)))
    assert _texts(reader.query(_query(base, q, 5))) == exact_top(base, q, 5)
    other.delete_nodes([IDS[TEXTS.index(exact_top(base, q, 1)[0])]])
    assert _texts(reader.query(_query(base, q, 4))) == exact_top(base, q, 5)[1:]
    replica = reader._search.indexes.replica
    assert len(replica) == 23 and replica.pending == 0 and reader.dead == 0
