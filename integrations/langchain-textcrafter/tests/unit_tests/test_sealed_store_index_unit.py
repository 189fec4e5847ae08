"""SealedVectorStore with the store-held index (``search=StoreIndexSearch()``): the store ranks nothing, and
the sealed index lives in the store, so another store object (another worker) with the key finds everything."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, ReadsRecorded, RecordingStore, exact_top

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError
from textcrafter_rag import GaussianNoise
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH
from textcrafter_rag.sealed.core import ModeMismatchError, UnindexedRecordsWarning, UnprotectedVectorsWarning
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.store_index import EXACT_EXTRA
from textcrafter_rag.sealing import Sealer, generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(40)]
IDS = [f"r{i}" for i in range(40)]


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _held(base, key: str, store=RecordingStore) -> SealedVectorStore:
    return SealedVectorStore(store, embedding=base, key=key, search=StoreIndexSearch(open_k=20))


def test_exact_results_and_the_store_is_searched_only_for_the_log_heads(base) -> None:
    key = generate_key()
    store = _held(base, key)
    store.add_texts(TEXTS, ids=IDS)
    for query in ("who was treated at ward 3?", "condition 5"):
        assert [d.page_content for d in store.similarity_search(query, k=5)] == exact_top(base, TEXTS, query, 5)
    heads = store._search.store_index().log.records.heads_direction()
    assert store.store.searched and all(v == heads for v in store.store.searched)
    rows = list(store.store.store.values())
    assert all(Sealer.is_sealed(r["text"]) or r["text"].startswith("tclog1.") for r in rows)
    assert any(r["metadata"].get(LOG_FIELD) == "head" for r in rows)


def test_another_worker_with_only_the_key_finds_every_record_and_sees_later_writes(base) -> None:
    key = generate_key()
    first = _held(base, key)
    first.add_texts(TEXTS[:20], ids=IDS[:20])
    second = _held(base, key, store=first.store)  # a fresh process over the same records: no file, no cache
    q = "condition 3 at ward 2"
    assert [d.page_content for d in second.similarity_search(q, k=3)] == exact_top(base, TEXTS[:20], q, 3)
    first.add_texts(TEXTS[20:], ids=IDS[20:])  # written after the second opened
    top = exact_top(base, TEXTS, q, 3)
    assert [d.page_content for d in second.similarity_search(q, k=3)] == top
    gone = IDS[TEXTS.index(top[0])]
    second.delete([gone])
    assert gone not in [d.id for d in first.similarity_search(q, k=20)]
    assert len(first.similarity_search(q, k=20)) == 20


@pytest.mark.parametrize("call", ["delete", "adelete"])
def test_a_worker_whose_first_call_is_a_delete_logs_the_tombstones(base, call: str) -> None:
    """A deleting worker knows the index's dimension from the marker: its tombstones reach the log, so no entry of
    a deleted record (its sealed clean vector) stays there, read and skipped by every search."""
    key = generate_key()
    first = _held(base, key)
    first.add_texts(TEXTS[:10], ids=IDS[:10])
    deleter = _held(base, key, store=first.store)
    if call == "delete":
        deleter.delete(IDS[:3])
    else:
        asyncio.run(deleter.adelete(IDS[:3]))
    reader = _held(base, key, store=first.store)
    assert sorted(d.id for d in reader.similarity_search(TEXTS[0], k=10)) == sorted(IDS[3:10])
    assert reader._search.dead == 0
    assert sorted(reader._search.store_index().index.ids()) == sorted(first.store_ids(IDS[3:10]))


def test_a_worker_that_writes_first_extends_the_index(base) -> None:
    key = generate_key()
    first = _held(base, key)
    first.add_texts(TEXTS[:10], ids=IDS[:10])
    late = _held(base, key, store=first.store)
    late.add_texts(TEXTS[10:12], ids=IDS[10:12])
    third = _held(base, key, store=first.store)
    assert sorted(d.id for d in third.similarity_search(TEXTS[0], k=12)) == sorted(IDS[:12])


def test_rebuild_indexes_records_written_without_a_log(base) -> None:
    key = generate_key()
    store = _held(base, key)
    store.add_texts(TEXTS, ids=IDS)
    inner = store.store
    for rid in [r for r, row in inner.store.items() if row["metadata"].get(LOG_FIELD)]:
        del inner.store[rid]  # the log is lost
    fresh = _held(base, key, store=inner)
    with pytest.warns(UnindexedRecordsWarning, match="rebuild_index"):
        assert fresh.similarity_search(TEXTS[3], k=1) == []
    assert fresh.rebuild_index(progress=False) == len(TEXTS)
    q = "condition 3 at ward 2"
    assert [d.page_content for d in _held(base, key, store=inner).similarity_search(q, k=3)] == exact_top(
        base, TEXTS, q, 3
    )


def test_async_paths(base) -> None:
    store = _held(base, generate_key())

    async def run() -> list[str]:
        await store.aadd_texts(TEXTS, ids=IDS)
        return [d.page_content for d in await store.asimilarity_search("condition 5", k=3)]

    assert asyncio.run(run()) == exact_top(base, TEXTS, "condition 5", 3)


def test_user_metadata_cannot_take_the_log_fields(base) -> None:
    store = _held(base, generate_key())
    with pytest.raises(ValueError, match="reserved"):
        store.add_texts(["x"], metadatas=[{LOG_FIELD: "head"}])


def test_copy_to_moves_any_number_of_records_in_batches(base) -> None:
    texts = [f"note {i} on topic {i % 13}" for i in range(150)]
    ids = [f"n{i}" for i in range(150)]
    source, target = _held(base, generate_key()), _held(base, generate_key())  # open_k=20: 8 batches
    source.add_texts(texts, ids=ids)
    assert source.copy_to(target, ids, delete_source=True) == ids
    assert sorted(d.id for d in target.get_by_ids(ids)) == sorted(ids)
    assert source.get_by_ids(ids) == []
    q = "topic 4"
    assert [d.page_content for d in target.similarity_search(q, k=5)] == exact_top(base, texts, q, 5)


class EmptyOnce(RecordingStore):
    """A store that answers reads by id with nothing for a while (a lagging replica, a timeout, a host)."""

    empty_reads = 0

    def get_by_ids(self, ids):  # type: ignore[no-untyped-def]
        if self.empty_reads:
            self.empty_reads -= 1
            return []
        return super().get_by_ids(ids)


def test_an_empty_answer_never_removes_an_index_entry(base) -> None:
    store = _held(base, generate_key(), store=EmptyOnce)
    store.add_texts(TEXTS, ids=IDS)
    q = "condition 5"
    store.store.empty_reads = 1  # one search's one read by id: the records, with the log's next segments
    assert store.similarity_search(q, k=5) == []  # nothing came back: nothing returned, nothing deleted
    assert store._search.dead == 5 + EXACT_EXTRA  # those read (the index is exact), and no more read after none
    assert [d.page_content for d in store.similarity_search(q, k=5)] == exact_top(base, TEXTS, q, 5)
    assert len(store._search.store_index()) == len(TEXTS)


def test_the_mode_comes_from_the_sealed_marker_and_no_error_recommends_a_weaker_mode(base) -> None:
    key = generate_key()
    store = _held(base, key)
    store.add_texts(TEXTS[:3], ids=IDS[:3])
    inner, marker = store.store, store._marker_id
    searched = len(inner.searched)
    row = inner.store[marker]
    inner.store[marker] = {**row, "metadata": {**row["metadata"], "_tc_marker": "single"}}  # the host's edit
    with pytest.raises(SealError, match="edited") as edited:
        SealedVectorStore(inner, key=key).similarity_search("q", k=1)
    inner.store[marker] = {**row, "text": Sealer(generate_key()).seal("single", record_id=marker, field="marker")}
    with pytest.raises(SealError, match="does not open") as forged:
        SealedVectorStore(inner, key=key).similarity_search("q", k=1)
    inner.store[marker] = row
    with pytest.raises(ModeMismatchError, match="sealed marker says it was written in 'store-index'") as mismatch:
        SealedVectorStore(inner, key=key, search=DEFAULT_SEARCH).similarity_search("q", k=1)
    for error in (edited, forged, mismatch):
        assert "fetch_k=None" not in str(error.value) and "search=None" not in str(error.value)
    assert len(inner.searched) == searched  # nothing was sent: no query reached the store


def test_single_stage_with_unprotected_embeddings_warns(base) -> None:
    with pytest.warns(UnprotectedVectorsWarning, match="not protected"):
        SealedVectorStore(RecordingStore, embedding=base, key=generate_key(), search=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnprotectedVectorsWarning)
        SealedVectorStore(
            RecordingStore,
            embedding=ProtectedEmbeddings(base=base, mechanism=GaussianNoise(s=0.05)),
            key=generate_key(),
            search=None,
        )


def test_compact_index_writes_a_snapshot_a_new_worker_opens_from(base) -> None:
    key = generate_key()
    first = _held(base, key)
    for start in range(0, 40, 10):  # four segments
        first.add_texts(TEXTS[start : start + 10], ids=IDS[start : start + 10])
    assert first.compact_index() is True
    kinds = [r["metadata"].get(LOG_FIELD) for r in first.store.store.values()]
    assert kinds.count("snap") >= 1 and kinds.count("seg") == 1  # the four covered segments were deleted
    second = _held(base, key, store=first.store)
    q = "condition 3 at ward 2"
    assert [d.page_content for d in second.similarity_search(q, k=5)] == exact_top(base, TEXTS, q, 5)
    assert second._search.store_index().snapshots.loaded == 1
    with pytest.raises(ValueError, match="store-held index"):
        SealedVectorStore(RecordingStore, embedding=base, key=key, search=DEFAULT_SEARCH).compact_index()


def test_a_search_makes_one_round_trip_when_the_log_has_no_news(base) -> None:
    """The in-memory store upserts, so every write overwrites the log's beacon: a search reads the records by id,
    and in the same request the log's next segment (one past each head: a head the search missed) and the beacon.
    The heads are searched only while the beacon's value was not read before a search of them."""
    key = generate_key()
    writer = _held(base, key, store=ReadsRecorded)
    writer.add_texts(TEXTS, ids=IDS)
    inner = writer.store
    reader = _held(base, key, store=inner)
    q = "condition 5"
    reader.similarity_search(q, k=5)  # the first search reads the whole log
    log, w = reader._search.store_index().log, writer._search.store_index().log.writer or ""
    probe = log.records.chunk_id(w, log.applied[w] + 1, 0)  # the writer's next segment (none yet)
    assert log.beacon is not None
    searches = (
        lambda: reader.similarity_search(q, k=5),  # the beacon read, then the heads searched: its value is seen
        lambda: reader.similarity_search(q, k=5),
        lambda: asyncio.run(reader.asimilarity_search(q, k=5)),
    )
    for n, search in enumerate(searches):
        inner.reads.clear()
        searched = len(inner.searched)
        assert [d.page_content for d in search()] == exact_top(base, TEXTS, q, 5)
        assert len(inner.searched) == searched + (n == 0)  # the heads, only until the beacon is seen
        assert len(inner.reads) == 1 and {probe, log.beacon.id} <= set(inner.reads[0])
        assert len(inner.reads[0]) == 5 + EXACT_EXTRA + 2
    later = "Patient 5 was treated for condition 5 at ward 5, again."
    writer.add_texts([later], ids=["later"])  # the beacon moves: the next search searches the heads
    searched = len(inner.searched)
    found = [d.page_content for d in reader.similarity_search(later, k=20)]
    assert found == exact_top(base, [*TEXTS, later], later, 20) and later in found
    assert len(inner.searched) == searched + 1
    assert reader._search.dead == 0


def test_a_segment_whose_head_the_search_missed_is_read_with_the_records_and_ranked(base) -> None:
    """A head the heads' search did not return (an approximate engine): the writer's next segment, read with
    the records, is applied before ranking, and the records it indexes are read then: found at this search."""
    key = generate_key()
    writer = _held(base, key, store=ReadsRecorded)
    writer.add_texts(TEXTS[:20], ids=IDS[:20])
    inner = writer.store
    reader = _held(base, key, store=inner)
    q = "condition 3 at ward 2"
    assert [d.page_content for d in reader.similarity_search(q, k=3)] == exact_top(base, TEXTS[:20], q, 3)
    log = writer._search.store_index().log
    old_head = log.records.head_id(log.writer or "", log.applied[log.writer or ""])
    kept = dict(inner.store[old_head])
    writer.add_texts(TEXTS[20:], ids=IDS[20:])  # one segment, its head, then the records
    new_head = log.records.head_id(log.writer or "", log.applied[log.writer or ""])
    del inner.store[new_head]  # the reader's search of the heads finds the old head only
    inner.store[old_head] = kept
    inner.reads.clear()
    assert [d.page_content for d in reader.similarity_search(q, k=3)] == exact_top(base, TEXTS, q, 3)
    # the records with the log's next segment; the segment after it (none); the records the index picks now
    assert len(inner.reads) == 3 and not set(inner.reads[2]) & set(inner.reads[0])
    assert reader._search.dead == 0 and len(reader._search.store_index()) == len(TEXTS)
