"""The store-held index in LlamaIndex (``search=StoreIndexSearch()``, the default where the store reads by id).

The store ranks nothing: each shell carries a keyed random vector, and the sealed index lives in the store as
its write log, so a second ``SealedVectorStore`` over the same store (another worker) with only the key finds
every record, and every later write. Qdrant in memory, the fake encoder of known vectors.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any
from unittest import mock

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore, VectorStoreQuery
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index.embeddings.textcrafter import SealedEmbedding, SealedVectorStore, sealed_storage_context
from textcrafter_rag import SingleStageSearch
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch
from textcrafter_rag.sealed.core import ModeMismatchError, StoreRanksWarning
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.store_index import EXACT_EXTRA
from textcrafter_rag.sealing import Sealer, SealError, generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import NOTE_IDS, NOTES, FakeBase, cosine, exact_top

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

pytestmark = pytest.mark.filterwarnings("ignore::llama_index.embeddings.textcrafter.ReportedVectorsWarning")

TEXTS, IDS = NOTES, NOTE_IDS
#: Each note's source document: three notes per document.
DOCS = [f"00000000-0000-4000-9000-{i // 3:012d}" for i in range(len(TEXTS))]


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def _nodes(base: FakeBase, rows: range | list[int]) -> list[TextNode]:
    out = []
    for i in rows:
        node = TextNode(id_=IDS[i], text=TEXTS[i], embedding=base.doc(TEXTS[i]))
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=DOCS[i])
        out.append(node)
    return out


def _worker(client: QdrantClient, key: str, **options: Any) -> SealedVectorStore:
    """One process's sealed store over the shared collection: a fresh object, no file, no cache."""
    return SealedVectorStore(QdrantVectorStore(client=client, collection_name="notes"), key=key, **options)


def _texts(store: SealedVectorStore, base: FakeBase, query: str, k: int, **fields: Any) -> list[str]:
    result = store.query(VectorStoreQuery(query_embedding=base.query(query), similarity_top_k=k, **fields))
    return [n.get_content() for n in result.nodes]


def _points(client: QdrantClient) -> list[Any]:
    return client.scroll("notes", limit=1000, with_payload=True, with_vectors=True)[0]


def test_the_default_is_the_store_held_index_and_another_worker_finds_every_record_and_later_writes(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    first = _worker(client, key)
    assert isinstance(first.search_options, StoreIndexSearch)  # the default where the store reads by id
    first.add(_nodes(base, range(12)))
    second = _worker(client, key)  # another worker with only the key
    q = "who was treated at ward 3?"
    assert _texts(second, base, q, 3) == [t for t in exact_top(base, q, 24) if t in TEXTS[:12]][:3]
    assert set(_texts(second, base, q, 12)) == set(TEXTS[:12])
    first.add(_nodes(base, range(12, 24)))  # written after the second opened
    assert _texts(second, base, q, 5) == exact_top(base, q, 5)
    assert set(_texts(second, base, q, 24)) == set(TEXTS)
    second.delete_nodes([IDS[TEXTS.index(exact_top(base, q, 1)[0])]])  # a delete by the other worker
    assert _texts(first, base, q, 4) == exact_top(base, q, 5)[1:]
    third = _worker(client, key)
    third.add(_nodes(base, [TEXTS.index(exact_top(base, q, 1)[0])]))  # a third worker writes first
    assert _texts(first, base, q, 5) == exact_top(base, q, 5)
    assert first.dead == second.dead == third.dead == 0
    # what the store holds: sealed shells under keyed random vectors, and the sealed log
    sids = first.store_ids(IDS)
    for p in _points(client):
        if LOG_FIELD in p.payload:
            assert json.loads(p.payload["_node_content"])["text"].startswith("tclog1.")  # sealed log records
            continue
        if "_tc_marker" in p.payload:
            assert p.payload["_tc_mode"] == "store-index" and p.payload["_tc_dim"] == "32"
            continue
        assert p.payload["_tc_mode"] == "store-index" and Sealer.is_sealed(p.payload["_tc_vec"])
        assert abs(cosine(p.vector, base.doc(TEXTS[sids.index(str(p.id))]))) < 0.7  # random, unrelated
    held = json.dumps([p.payload for p in _points(client)])
    assert not any(t in held for t in TEXTS) and not any(i in held for i in IDS)


def test_the_index_log_is_written_before_the_shells(base) -> None:
    """A crash between the two leaves entries without shells (skipped, counted), never a shell no search finds."""
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key)
    inner = type(store.store)
    order: list[str] = []
    real_add = inner.add

    def add(self: Any, nodes: list[Any], **kwargs: Any) -> list[str]:
        order.append("log" if all(LOG_FIELD in (n.metadata or {}) for n in nodes) else "shells")
        return real_add(self, nodes, **kwargs)

    with mock.patch.object(inner, "add", add):
        store.add(_nodes(base, range(6)))
    assert order[0] == "log" and "shells" in order and order.index("shells") > order.index("log")


@pytest.mark.parametrize("search", [StoreIndexSearch(open_k=30), AppIndexSearch(open_k=30)], ids=["store", "app"])
def test_an_empty_answer_never_deletes_an_index_entry(base, search: Any) -> None:
    """Issue 39 item 3: a read that returned fewer shells than asked removed the others from the index for good."""
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key, search=search)
    store.add(_nodes(base, range(24)))
    data = set(store.store_ids(IDS))
    real_retrieve = client.retrieve  # the store reads by id through it (sealed reads on Qdrant)
    empty = {"left": 1}

    def retrieve(*args: Any, ids: Any = (), **kwargs: Any) -> list[Any]:
        got = real_retrieve(*args, ids=ids, **kwargs)
        if set(map(str, ids)) & data and empty["left"]:
            empty["left"] -= 1
            return [p for p in got if str(p.id) not in data]  # a lagging replica, or a host that answers none once
        return got

    with mock.patch.object(client, "retrieve", retrieve):
        assert _texts(store, base, "condition 3", 5) == []
    read = 5 + EXACT_EXTRA if isinstance(search, StoreIndexSearch) else 24  # an exact store-held index reads k + 8
    assert empty["left"] == 0 and store.dead == read  # counted, not removed
    assert set(_texts(store, base, "condition 3", 24)) == set(TEXTS)  # every record still found
    assert _texts(store, base, "condition 3", 5) == exact_top(base, "condition 3", 5)


@pytest.mark.parametrize("search", [StoreIndexSearch(open_k=30), AppIndexSearch(open_k=30)], ids=["store", "app"])
def test_doc_ids_and_node_ids_restrict_an_index_search(base, search: Any) -> None:
    """Issue 39 item 2: an index mode ignored the retriever's doc_ids and node_ids and answered from every node."""
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key, search=search)
    store.add(_nodes(base, range(24)))
    q = "condition 3 at ward 2"
    wanted_docs = [DOCS[0], DOCS[9]]
    allowed = [t for t, d in zip(TEXTS, DOCS) if d in wanted_docs]
    got = _texts(store, base, q, 4, doc_ids=wanted_docs)
    assert got and set(got) <= set(allowed)
    assert got == [t for t in exact_top(base, q, 24) if t in allowed][: len(got)]
    named = [IDS[1], IDS[7], IDS[20]]
    assert _texts(store, base, q, 5, node_ids=named) == [
        t for t in exact_top(base, q, 24) if t in {TEXTS[1], TEXTS[7], TEXTS[20]}
    ]
    assert _texts(store, base, q, 5, node_ids=named, doc_ids=[DOCS[7]]) == [TEXTS[7]]
    # the retriever sets them too
    index = VectorStoreIndex.from_vector_store(store, embed_model=SealedEmbedding(base=base))
    hits = index.as_retriever(similarity_top_k=4, doc_ids=wanted_docs).retrieve(q)
    assert hits and {h.node.get_content() for h in hits} <= set(allowed)


def test_rebuild_index_indexes_shells_whose_log_was_lost(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    _worker(client, key).add(_nodes(base, range(24)))
    log = [p.id for p in _points(client) if LOG_FIELD in p.payload]
    assert log
    client.delete("notes", points_selector=log)  # the log is lost; shells and marker remain
    fresh = _worker(client, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the core warns that the store holds records it cannot find
        assert _texts(fresh, base, TEXTS[3], 1) == []
    assert fresh.rebuild_index(progress=False) == 24
    q = "condition 3 at ward 2"
    assert _texts(_worker(client, key), base, q, 5) == exact_top(base, q, 5)
    with pytest.raises(ValueError, match="store-held index"):
        _worker(client, key, fetch_k=30).rebuild_index(progress=False)


def test_deletes_by_source_document_and_clear_reach_every_worker(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    embed = SealedEmbedding(base=base)
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(client=client, collection_name="notes"), key=key, embed_model=embed
    )
    index = VectorStoreIndex(_nodes(base, range(24)), storage_context=ctx, embed_model=embed)
    store = index.vector_store
    other = _worker(client, key)
    assert len(_texts(other, base, "x", 24)) == 24
    index.delete_ref_doc(DOCS[0])  # three notes
    assert set(_texts(other, base, "x", 24)) == set(TEXTS[3:])
    assert other.dead == 0  # their entries were tombstoned, not left to be skipped
    assert len(store.get_nodes()) == 21  # the marker and the log are the sealed store's own, never nodes
    store.clear()
    assert _texts(other, base, "x", 24) == [] and other.dead == 0  # the tombstones reached the other worker
    store.add(_nodes(base, range(3)))  # the log starts over: no rollback for a new worker
    assert set(_texts(_worker(client, key), base, "x", 5)) == set(TEXTS[:3])
    assert set(_texts(other, base, "x", 5)) == set(TEXTS[:3])


def test_a_writer_that_wrote_before_a_clear_writes_on_after_it(base) -> None:
    """A clear took every writer's log with the store; a worker that had written before it writes on under its
    old writer id, and no reader takes its next segment (above the cleared ones) for a rollback."""
    client, key = QdrantClient(":memory:"), generate_key()
    clearer, live = _worker(client, key), _worker(client, key)
    clearer.add(_nodes(base, range(6)))
    live.add(_nodes(base, range(6, 12)))  # segment 1 of the live worker's log
    clearer.clear()
    live.add(_nodes(base, range(12, 15)))  # its segment 2, above a cleared segment 1
    for reader in (_worker(client, key), clearer, live):
        assert set(_texts(reader, base, "x", 24)) == set(TEXTS[12:15])
        assert reader.dead == 0


def test_compact_index_writes_a_snapshot_a_new_worker_opens_from(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    writer = _worker(client, key)
    for start in range(0, 24, 6):
        writer.add(_nodes(base, range(start, start + 6)))
    assert writer.compact_index() is True
    kinds = [p.payload.get(LOG_FIELD) for p in _points(client)]
    assert "snap" in kinds and kinds.count("seg") == 1
    fresh = _worker(client, key)
    q = "condition 3 at ward 2"
    assert _texts(fresh, base, q, 5) == exact_top(base, q, 5)
    assert fresh._search.store_index().snapshots.loaded == 1


def test_async_paths(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key)

    other = _worker(client, key)

    async def run() -> list[str]:
        await store.async_add(_nodes(base, range(24)))
        await store.adelete_nodes([IDS[0]])
        await store.adelete(DOCS[23])  # notes 21, 22 and 23
        result = await store.aquery(VectorStoreQuery(query_embedding=base.query("condition 3"), similarity_top_k=5))
        assert set(_texts(other, base, "x", 24)) == set(TEXTS[1:21]) and other.dead == 0
        await store.aclear()
        assert _texts(other, base, "x", 24) == [] and other.dead == 0
        await store.async_add(_nodes(base, range(21)))
        return [n.get_content() for n in result.nodes]

    inner = type(store.store)
    with (  # the in-memory client is sync: its async methods run the sync ones
        mock.patch.object(inner, "async_add", lambda self, nodes, **kw: asyncio.to_thread(self.add, nodes, **kw)),
        mock.patch.object(
            inner,
            "aget_nodes",
            lambda self, node_ids=None, filters=None: asyncio.to_thread(self.get_nodes, node_ids, filters),
        ),
        mock.patch.object(inner, "aclear", lambda self: asyncio.to_thread(self.clear)),
        mock.patch.object(inner, "adelete", lambda self, ref, **kw: asyncio.to_thread(self.delete, ref, **kw)),
        mock.patch.object(
            inner,
            "adelete_nodes",
            lambda self, node_ids=None, filters=None, **kw: asyncio.to_thread(
                self.delete_nodes, node_ids, filters, **kw
            ),
        ),
    ):
        got = asyncio.run(run())
    assert got == [t for t in exact_top(base, "condition 3", 24) if t in TEXTS[1:21]][:5]
    assert set(_texts(_worker(client, key), base, "condition 3", 24)) == set(TEXTS[:21])


def test_stores_written_before_open_in_their_own_mode(base) -> None:
    q = "condition 4"
    for options, mode in (({"search": None}, None), ({"fetch_k": 30}, TwoStageSearch), ({}, StoreIndexSearch)):
        client, key = QdrantClient(":memory:"), generate_key()
        _worker(client, key, **options).add(_nodes(base, range(24)))
        reopened = _worker(client, key)  # no search=: the mode it was written in
        got = _texts(reopened, base, q, 3)
        assert len(got) == 3 and set(got) <= set(TEXTS)
        if mode is None:
            assert reopened.search_options == SingleStageSearch()  # its marker names it
            writer = _worker(client, key, search=None)
            writer.store.delete_nodes([writer._marker_id])  # as an earlier release wrote it: no marker
            assert not writer.store.get_nodes(node_ids=[writer._marker_id])
            older = _worker(client, key)
            assert len(_texts(older, base, q, 3)) == 3 and older.search_options == SingleStageSearch()  # by its shells
        else:
            assert isinstance(reopened.search_options, mode)
            assert got == exact_top(base, q, 3)
    client, key = QdrantClient(":memory:"), generate_key()
    _worker(client, key, fetch_k=30).add(_nodes(base, range(4)))
    with pytest.raises(ModeMismatchError, match="'candidates' mode"):  # an explicit mode is never replaced
        _worker(client, key, search=StoreIndexSearch()).query(
            VectorStoreQuery(query_embedding=base.query(q), similarity_top_k=1)
        )


class _NoReadById(BasePydanticVectorStore):
    """A store that keeps payloads but cannot read by id."""

    stores_text: bool = True

    @property
    def client(self) -> Any:
        return None

    def add(self, nodes: Any, **kwargs: Any) -> list[str]:
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        return None

    def query(self, query: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_a_store_that_cannot_read_by_id_gets_candidates_as_in_langchain_and_says_so_once(monkeypatch) -> None:
    """The fallback both adapters share: candidates where the store keeps payloads, else single-stage."""
    from llama_index.embeddings.textcrafter import _mode_choice

    monkeypatch.setattr(_mode_choice, "_WARNED", set())
    with pytest.warns(StoreRanksWarning, match="falls back to candidates"):
        assert SealedVectorStore(_NoReadById(), key=generate_key()).search_options == DEFAULT_SEARCH
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SealedVectorStore(_NoReadById(), key=generate_key()).search_options == DEFAULT_SEARCH  # once a class
        assert SealedVectorStore(_NoReadById(), key=generate_key(), search=None).search_options == SingleStageSearch()
    with pytest.warns(StoreRanksWarning, match="ranks the nodes' embeddings itself"):  # it keeps no payloads
        ctx = sealed_storage_context(vector_store=SimpleVectorStore(), key=generate_key())
    assert ctx.vector_store.search_options == SingleStageSearch()
    with pytest.raises(ValueError, match="reads records by id"):
        SealedVectorStore(_NoReadById(), key=generate_key(), search=StoreIndexSearch())


def test_reserved_fields_are_refused(base) -> None:
    store = _worker(QdrantClient(":memory:"), generate_key())
    for name in (LOG_FIELD, "_tc_dim", "_tc_chunks"):
        node = TextNode(id_=IDS[0], text=TEXTS[0], metadata={name: "head"}, embedding=base.doc(TEXTS[0]))
        with pytest.raises(ValueError, match="reserved"):
            store.add([node])


def test_a_delete_by_filter_reaches_the_index(base) -> None:
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

    client, key = QdrantClient(":memory:"), generate_key()
    store = _worker(client, key)
    nodes = _nodes(base, range(24))
    for i, node in enumerate(nodes):
        node.metadata["ward"] = str(i % 5)
    store.add(nodes)
    other = _worker(client, key)
    assert len(_texts(other, base, "x", 24)) == 24
    store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="ward", value="3")]))
    assert set(_texts(other, base, "x", 24)) == {t for i, t in enumerate(TEXTS) if i % 5 != 3}
    assert other.dead == 0  # tombstoned, not left to be skipped


def test_workers_opened_before_the_collection_existed_and_a_clear_after_every_delete(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    a, b = _worker(client, key), _worker(client, key)  # both before the collection exists
    a.add(_nodes(base, range(6)))  # creates it
    b.add(_nodes(base, range(6, 12)))  # its Qdrant store reads the collection's vector format first
    assert set(_texts(b, base, "x", 12)) == set(TEXTS[:12])
    a.delete_nodes(IDS[:12])
    a.clear()  # a's index holds no id, but its writer has written: it writes on as a new one
    a.add(_nodes(base, range(2)))
    assert set(_texts(_worker(client, key), base, "x", 5)) == set(TEXTS[:2])  # no rollback for a new worker


def test_the_mode_comes_from_the_sealed_marker_and_no_error_recommends_a_weaker_mode(base) -> None:
    client, key = QdrantClient(":memory:"), generate_key()
    first = _worker(client, key)
    first.add(_nodes(base, range(6)))
    marker = next(p for p in _points(client) if (p.payload or {}).get("_tc_marker"))
    content = json.loads(marker.payload["_node_content"])
    content["metadata"]["_tc_marker"] = "single"  # the host says the store was written single-stage
    client.set_payload(
        "notes", payload={"_tc_marker": "single", "_node_content": json.dumps(content)}, points=[marker.id]
    )
    with pytest.raises(SealError, match="edited") as edited:
        _texts(_worker(client, key), base, TEXTS[0], 2)
    client.set_payload("notes", payload=marker.payload, points=[marker.id])
    with pytest.raises(ModeMismatchError, match="sealed marker says it was written in 'store-index'") as mismatch:
        _texts(_worker(client, key, search=TwoStageSearch()), base, TEXTS[0], 2)
    for error in (edited, mismatch):
        assert "fetch_k=None" not in str(error.value) and "search=None" not in str(error.value)
    assert len(_texts(_worker(client, key), base, TEXTS[0], 2)) == 2  # the untouched marker opens as written


def test_single_stage_warns_when_handed_vectors_no_protected_embedding_made(base) -> None:
    from llama_index.embeddings.textcrafter import ProtectedEmbedding
    from textcrafter_rag import GaussianNoise
    from textcrafter_rag.sealed.core import UnprotectedVectorsWarning

    store = SealedVectorStore(SimpleVectorStore(), key=generate_key(), search=None)
    with pytest.warns(UnprotectedVectorsWarning, match="2 of 2 vectors came from no ProtectedEmbedding"):
        store.add(_nodes(base, range(2)))
    protected = ProtectedEmbedding(base=base, mechanism=GaussianNoise(s=0.05))
    nodes = _nodes(base, range(2, 4))
    for node, vector in zip(nodes, protected.get_text_embedding_batch([n.text for n in nodes]), strict=True):
        node.embedding = vector
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnprotectedVectorsWarning)
        store.add(nodes)


def test_a_qdrant_store_reads_by_id_with_retrieve_not_a_filtered_scroll(base) -> None:
    """Qdrant's ``get_nodes`` scrolls with a has-id filter (local Qdrant tests every point for it): a search of
    the store-held index, log probe and records, reads by id with ``retrieve`` instead, sync and async."""
    client, key = QdrantClient(":memory:"), generate_key()
    _worker(client, key).add(_nodes(base, range(24)))
    store = _worker(client, key)
    q = "who was treated at ward 3?"
    calls: list[str] = []
    real_scroll, real_retrieve = client.scroll, client.retrieve

    def scroll(*args: Any, **kwargs: Any) -> Any:
        calls.append("scroll")
        return real_scroll(*args, **kwargs)

    def retrieve(*args: Any, **kwargs: Any) -> Any:
        calls.append("retrieve")
        return real_retrieve(*args, **kwargs)

    async def aretrieve(*args: Any, **kwargs: Any) -> Any:
        calls.append("aretrieve")
        return real_retrieve(*args, **kwargs)

    _texts(store, base, q, 3)  # the first search reads the whole log
    with mock.patch.object(client, "scroll", scroll), mock.patch.object(client, "retrieve", retrieve):
        assert _texts(store, base, q, 5) == exact_top(base, q, 5)
    assert "scroll" not in calls and "retrieve" in calls
    calls.clear()
    store.store._aclient = mock.Mock(retrieve=aretrieve)  # an async client: the index's own log reads stay sync
    with mock.patch.object(client, "scroll", scroll), mock.patch.object(client, "retrieve", retrieve):
        result = asyncio.run(store.aquery(VectorStoreQuery(query_embedding=base.query(q), similarity_top_k=5)))
    assert [n.get_content() for n in result.nodes] == exact_top(base, q, 5)
    assert "scroll" not in calls and "aretrieve" in calls and store.dead == 0
