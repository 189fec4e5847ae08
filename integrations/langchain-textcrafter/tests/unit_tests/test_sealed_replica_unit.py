"""SealedVectorStore with the store-held index's replica (``StoreIndexSearch(replica=True)``): a query reads no
record from the store, only the log's heads search and probes, the same whatever the query; another worker's
writes and deletes are seen at the next search. The store records every read by id, as its operator would."""

from __future__ import annotations

import asyncio

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, exact_top
from _langchain_textcrafter_fakes import ReadsRecorded as _ReadsRecorded

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.layout import MARKER_KEY
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.store_index import EXACT_EXTRA
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(40)]
IDS = [f"r{i}" for i in range(40)]


class DataReads(_ReadsRecorded):
    """The shared store that records every read by id, with the data records' share of them."""

    def data_reads(self) -> list[str]:
        """Ids of data records (not the index log's) that reads by id asked for."""
        return [i for ids in self.reads for i in ids if i in self.data_ids()]

    def data_ids(self) -> set[str]:
        """Ids of the sealed data records (not the log's, not the marker)."""
        return {i for i, r in self.store.items() if not {LOG_FIELD, MARKER_KEY} & set(r["metadata"])}


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _worker(base, key: str, *, replica: bool, store=DataReads) -> SealedVectorStore:
    return SealedVectorStore(store, embedding=base, key=key, search=StoreIndexSearch(open_k=20, replica=replica))


def test_with_the_replica_searches_read_no_record_and_every_query_reads_the_same(base) -> None:
    key = generate_key()
    writer = _worker(base, key, replica=False)
    writer.add_texts(TEXTS, ids=IDS)
    reader = _worker(base, key, replica=True, store=writer.store)
    store = writer.store
    store.reads.clear()
    assert reader.similarity_search("warm-up", k=1)  # the open: every record read once
    assert sorted(store.data_reads()) == sorted(store.data_ids())
    seen = []
    for query in ("who was treated at ward 3?", "condition 5", "Patient 12"):
        store.reads.clear()
        assert [d.page_content for d in reader.similarity_search(query, k=5)] == exact_top(base, TEXTS, query, 5)
        assert store.data_reads() == []
        seen.append(list(store.reads))
    assert seen[0] == seen[1] == seen[2]
    store.reads.clear()
    assert [d.page_content for d in asyncio.run(reader.asimilarity_search("condition 5", k=5))] == exact_top(
        base, TEXTS, "condition 5", 5
    )
    assert store.data_reads() == [] and store.reads == seen[0]
    assert reader.max_marginal_relevance_search("condition 2", k=3) and store.data_reads() == []


def test_without_the_replica_each_search_reads_its_records(base) -> None:
    key = generate_key()
    writer = _worker(base, key, replica=False)
    writer.add_texts(TEXTS, ids=IDS)
    writer.store.reads.clear()
    writer.similarity_search("condition 5", k=5)
    assert len(writer.store.data_reads()) == 5 + EXACT_EXTRA  # by id (the index is exact): what the replica hides


def test_another_workers_writes_and_deletes_are_seen_at_the_next_search(base) -> None:
    key = generate_key()
    reader = _worker(base, key, replica=True)
    reader.add_texts(TEXTS[:10], ids=IDS[:10])  # its own writes reach its replica too
    other = _worker(base, key, replica=False, store=reader.store)
    q = "condition 3 at ward 2"
    assert [d.page_content for d in reader.similarity_search(q, k=3)] == exact_top(base, TEXTS[:10], q, 3)
    other.add_texts(TEXTS[10:], ids=IDS[10:])
    top = exact_top(base, TEXTS, q, 3)
    assert [d.page_content for d in reader.similarity_search(q, k=3)] == top
    gone = IDS[TEXTS.index(top[0])]
    other.delete([gone])
    assert gone not in [d.id for d in reader.similarity_search(q, k=20)]
    replica = reader._search.indexes.replica
    assert len(replica) == 39 and replica.pending == 0


def test_an_updated_record_is_read_again(base) -> None:
    key = generate_key()
    reader = _worker(base, key, replica=True)
    reader.add_texts(TEXTS[:5], ids=IDS[:5])
    reader.similarity_search(TEXTS[0], k=1)
    other = _worker(base, key, replica=False, store=reader.store)
    other.add_texts(["an entirely new note about ward 9"], ids=[IDS[0]])
    found = reader.similarity_search("an entirely new note about ward 9", k=1)
    assert found[0].id == IDS[0] and found[0].page_content == "an entirely new note about ward 9"


def test_async_writes_and_searches_with_the_replica(base) -> None:
    key = generate_key()
    reader = _worker(base, key, replica=True)

    async def run() -> list[str]:
        await reader.aadd_texts(TEXTS[:8], ids=IDS[:8])
        return [d.page_content for d in await reader.asimilarity_search("condition 4", k=3)]

    assert run_result(run) == exact_top(base, TEXTS[:8], "condition 4", 3)
    reader.store.reads.clear()
    asyncio.run(reader.asimilarity_search("ward 1", k=2))
    assert reader.store.data_reads() == []


def run_result(make):  # type: ignore[no-untyped-def]
    return asyncio.run(make())
