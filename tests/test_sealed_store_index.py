"""The store-held index's write protocol, over a dict-backed port (the real-engine, real-process tests are in
the LangChain package's integration tests): every property is forced at a chosen point, never by timing."""

from __future__ import annotations

import numpy as np
import pytest
from _store_index_helpers import DIM, KEY, process, vectors

from textcrafter_rag.sealed import IndexRollbackError, IndexTamperedError, PortRecord, StoreIndex, StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.testing.memory_port import CrashAt, MemoryPort


def test_a_second_process_with_only_the_key_finds_every_record():
    port, x = MemoryPort(), vectors(50, 0)
    writer = process(port)
    writer.add([f"r{i}" for i in range(50)], x)
    reader = process(port)
    for i in (0, 17, 49):
        assert reader.candidates(x[i], 1) == [f"r{i}"]
    assert len(reader) == 50


def test_a_reader_opened_before_a_write_sees_it_at_its_next_search():
    port, x = MemoryPort(), vectors(20, 1)
    reader, writer = process(port), process(port)
    assert reader.candidates(x[0], 1) == []
    writer.add(["a", "b"], x[:2])
    assert reader.candidates(x[1], 1) == ["b"]


def test_concurrent_writers_lose_nothing_and_deletes_apply_everywhere():
    port, x = MemoryPort(), vectors(30, 2)
    writers = [process(port) for _ in range(3)]
    for w, writer in enumerate(writers):  # interleaved: each writer appends to its own log
        writer.add([f"w{w}-{i}" for i in range(5)], x[10 * w : 10 * w + 5])
    for w, writer in enumerate(writers):
        writer.add([f"w{w}-{i}" for i in range(5, 10)], x[10 * w + 5 : 10 * w + 10])
    writers[1].remove(["w0-3"])
    reader = process(port)
    assert len(reader.candidates(x[0], 30)) == 29
    assert "w0-3" not in reader.candidates(x[3], 30)
    assert len({w.log.writer for w in writers}) == 3
    heads = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "head"]
    assert len(heads) == 3  # one head a writer: the older ones were deleted after the newer was written


def test_a_crash_between_segment_and_head_is_found_one_past_the_head():
    port, x = MemoryPort(), vectors(4, 3)
    writer = process(port)
    writer.add(["a"], x[:1])
    port.crash_at_put = port.puts + 2  # the next add writes its segment, then dies writing its head
    with pytest.raises(CrashAt):
        writer.add(["b"], x[1:2])
    assert process(port).candidates(x[1], 1) == ["b"]  # the entry is there (its record may not be: skipped)


def test_a_crash_between_two_calls_of_one_segment_leaves_no_first_chunk_without_the_rest():
    """Over a server's client a segment goes in several calls (LOG_WRITE_BATCH chunks each): killed after the
    first, the store holds part of it. Readers probe a segment's first chunk, so it is written last: they find
    nothing of the dead segment and go on, where a first chunk without the rest would read as a rollback."""
    port, x = MemoryPort(), vectors(1_200, 8)
    port.concurrent_calls = True  # as a server's client: a few chunks a call
    writer = process(port, segment_chars=2048)
    writer.add([f"a{i}" for i in range(600)], x[:600])
    port.crash_at_put = port.puts + 2  # the next segment's second call (of several) fails
    with pytest.raises(CrashAt):
        writer.add([f"b{i}" for i in range(600)], x[600:])
    reader = process(port, segment_chars=2048)
    assert reader.candidates(x[7], 1) == ["a7"] and len(reader) == 600  # nothing lost, nothing raised
    port.crash_at_put = None
    writer.add(["c"], x[:1])  # the writer goes on; every reader follows it past the dead segment
    assert "c" in reader.candidates(x[0], 2) and len(reader) == 601


def test_an_empty_answer_never_removes_an_entry():
    port, x = MemoryPort(), vectors(10, 4)
    process(port).add([f"r{i}" for i in range(10)], x)
    reader = process(port)
    assert len(reader.candidates(x[0], 10)) == 10
    port.empty_answers = 5
    assert len(reader.candidates(x[0], 10)) == 10
    assert len(reader.candidates(x[0], 10)) == 10


def test_a_rolled_back_head_is_detected():
    port, x = MemoryPort(), vectors(3, 5)
    writer = process(port)
    writer.add(["a"], x[:1])
    w = writer.log.writer
    old = port.records[writer.log.records.head_id(w, 1)]
    reader = process(port)
    reader.refresh()
    writer.add(["b"], x[1:2])
    reader.refresh()
    port.records[old.id] = old  # the host puts back the older head, and deletes the newer head and segment
    port.delete([writer.log.records.head_id(w, 2), writer.log.records.chunk_id(w, 2, 0)])
    with pytest.raises(IndexRollbackError):
        reader.refresh()


def test_a_segment_deleted_below_a_head_is_detected_by_a_fresh_process():
    port, x = MemoryPort(), vectors(3, 6)
    writer = process(port)
    writer.add(["a"], x[:1])
    writer.add(["b"], x[1:2])
    port.delete([writer.log.records.chunk_id(writer.log.writer, 1, 0)])
    with pytest.raises(IndexRollbackError):
        process(port).refresh()


def test_an_edited_or_swapped_segment_is_refused():
    port, x = MemoryPort(), vectors(3, 7)
    writer = process(port)
    writer.add(["a"], x[:1])
    writer.add(["b"], x[1:2])
    w = writer.log.writer
    one, two = writer.log.records.chunk_id(w, 1, 0), writer.log.records.chunk_id(w, 2, 0)
    moved = port.records[two]
    port.records[one] = PortRecord(one, moved.text, dict(moved.fields), port.records[one].vector)
    with pytest.raises(IndexTamperedError):
        process(port).refresh()


def test_another_tenants_log_in_the_same_collection_is_passed_over():
    port, x = MemoryPort(), vectors(4, 8)
    process(port).add(["a"], x[:1])
    other = StoreIndex(KEY, context="other", options=StoreIndexSearch(), port=port, dim=DIM)
    other.add(["z"], x[1:2])
    assert process(port).candidates(x[1], 5) == ["a"]


def test_big_segments_are_chunked_to_the_field_limit_and_read_back():
    port, x = MemoryPort(), vectors(300, 9)
    process(port, segment_chars=2048).add([f"r{i}" for i in range(300)], x)
    log_texts = [r.text for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg"]
    assert len(log_texts) > 3 and max(len(t) for t in log_texts) <= 2048
    assert process(port).candidates(x[123], 1) == ["r123"]


def test_the_store_never_holds_an_id_or_a_clean_vector_of_the_index_in_clear():
    port, x = MemoryPort(), vectors(5, 10)
    process(port).add(["patient-jane-doe"], x[:1])
    for rec in port.records.values():
        assert "patient-jane-doe" not in rec.text and "patient-jane-doe" not in str(rec.fields)
        assert abs(float(np.dot(np.asarray(rec.vector), x[0]))) < 0.9


def test_a_first_writer_without_a_cache_extends_the_index_it_finds():
    port, x = MemoryPort(), vectors(6, 11)
    process(port).add(["a", "b", "c"], x[:3])
    process(port).add(["d"], x[3:4])  # a new process whose first act is a write
    assert sorted(process(port).candidates(x[0], 10)) == ["a", "b", "c", "d"]


def test_rebuild_indexes_what_the_batches_name_and_never_tombstones():
    port, x = MemoryPort(), vectors(8, 12)
    index = process(port)
    index.add(["a"], x[:1])
    seen = []
    n = index.rebuild([(["b", "c"], x[1:3]), (["d"], x[3:4])], progress=seen.append)
    assert n == 3 and seen == [2, 1]
    assert sorted(process(port).candidates(x[0], 10)) == ["a", "b", "c", "d"]


def test_training_swaps_in_codes_and_keeps_every_record():
    port, x = MemoryPort(), vectors(600, 13)
    index = process(port, train_at=512, code_bytes=8, background_training=False)
    index.add([f"r{i}" for i in range(600)], x)
    assert index.index.trained and len(index) == 600
    hits = index.candidates(x[42], 50)
    assert "r42" in hits


def test_options_are_validated():
    with pytest.raises(ValueError):
        StoreIndexSearch(open_k=0)
    with pytest.raises(TypeError):
        StoreIndexSearch(refresh_every="soon")
    with pytest.raises(ValueError):
        StoreIndexSearch(scan_codes=0)


def test_scan_codes_sets_how_many_lists_a_trained_query_probes():
    x = vectors(3_000, 9)
    narrow, wide = (
        StoreIndex(KEY, tenant="t", options=opts, port=MemoryPort(), dim=DIM)
        for opts in (
            StoreIndexSearch(train_at=1_000, background_training=False, compact_every=0, scan_codes=1),
            StoreIndexSearch(train_at=1_000, background_training=False, compact_every=0, scan_codes=3_000),
        )
    )
    for held in (narrow, wide):
        held.add([f"r{i}" for i in range(3_000)], x)
        assert held.index.trained and held.candidates(x[5], 10)[0] == "r5"
    lists, fewest = narrow.index.lists
    assert 1 < fewest < lists and wide.index.lists == (lists, lists)  # at least the floor; every list


def test_data_records_get_the_index_modes_keyed_vectors():
    from textcrafter_rag.sealed.app_index import AppIndexSearch
    from textcrafter_rag.sealed.core import SealedSearch

    x = vectors(5, 14)
    held = SealedSearch(KEY, context="t", options=StoreIndexSearch())
    file_mode = SealedSearch(KEY, context="t", options=AppIndexSearch())
    ids = [f"r{i}" for i in range(5)]
    assert np.array_equal(held.store_vectors(x, ids), file_mode.store_vectors(x, ids))
    assert abs(held.store_vectors(x, ids) @ x.T).max() < 0.9  # unrelated to the clean vectors


class MissesHeads(MemoryPort):
    """An approximate engine's search that misses the heads of one writer."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden: set[str] = set()

    def search(self, vector, k):
        return [r for r in super().search(vector, k + len(self.hidden)) if r.id not in self.hidden][:k]


def test_a_head_the_search_misses_is_found_through_a_head_that_names_its_writer():
    port, x = MissesHeads(), vectors(4, 15)
    first, second = process(port), process(port)
    first.add(["a"], x[:1])
    second.add(["b"], x[1:2])  # second read the log before writing: its head names the first writer
    port.hidden = {r.id for r in port.records.values() if r.fields.get(LOG_FIELD) == "head"}
    port.hidden -= {second.log.records.head_id(second.log.writer, 1)}
    assert sorted(process(port).candidates(x[0], 5)) == ["a", "b"]


def test_the_first_head_search_asks_for_few_records():
    port, x = MemoryPort(), vectors(50, 16)
    process(port).add([f"r{i}" for i in range(50)], x)
    asked = []
    search = port.search
    port.search = lambda vector, k: asked.append(k) or search(vector, k)  # type: ignore[method-assign]
    process(port).refresh()
    assert asked == [4]  # one head found among the first four records: the search stops there


class CountingPort(MemoryPort):
    """A MemoryPort that remembers how many ids each read asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def get(self, ids):
        self.asked.append(len(ids))
        return super().get(ids)


def test_a_writers_segments_apply_in_its_own_order_even_when_its_clock_goes_back(monkeypatch):
    port, x = MemoryPort(), vectors(2, 8)
    writer = process(port)
    clock = iter([3_000, 2_000, 1_000])  # each append stamps an earlier time than the last
    monkeypatch.setattr("textcrafter_rag.sealed.log.time.time_ns", lambda: next(clock))
    writer.add(["a"], x[:1])
    writer.remove(["a"])  # after the add: a reader must end with "a" deleted
    writer.add(["b"], x[1:])
    reader = process(port)
    assert reader.candidates(x[0], 2) == ["b"]


def test_opening_a_long_log_reads_a_bounded_batch_of_segments_at_a_time():
    port, x = CountingPort(), vectors(200, 9)
    writer = process(port)
    for i in range(100):  # one segment an add: 100 segments of one writer
        writer.add([f"r{i}", f"s{i}"], x[2 * i : 2 * i + 2])
    port.asked.clear()
    reader = process(port)
    assert reader.refresh() == 100 and len(reader) == 200
    assert max(port.asked) <= 16  # never the whole log in one read (nor in memory)
    assert reader.candidates(x[150], 1) == ["r75"]


def test_a_write_made_after_reading_another_writers_is_merged_after_it_whatever_the_clocks(monkeypatch):
    """Writer B's clock runs an hour ahead of A's. B deletes "x"; then A, having read B's delete (each write reads
    the log first), adds "x" again: every process must end with "x" indexed, as the store holds it."""
    port, x = MemoryPort(), vectors(2, 10)
    a, b = process(port), process(port)
    hour = 3_600 * 10**9
    now = {"t": 10**18}
    monkeypatch.setattr("textcrafter_rag.sealed.log.time.time_ns", lambda: now["t"])
    a.add(["x"], x[:1])
    now["t"] += hour  # B's machine
    b.remove(["x"])
    now["t"] -= hour - 1  # A's machine: a nanosecond after its first write
    a.add(["x"], x[:1])
    for reader in (process(port), b):
        assert reader.candidates(x[0], 1) == ["x"]


class _CountedGets(MemoryPort):
    """A port that counts its reads by id."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[list[str]] = []

    def get(self, ids):  # type: ignore[no-untyped-def]
        self.gets.append(list(ids))
        return super().get(ids)


def test_a_search_leaves_the_read_one_past_each_head_to_its_records_read_and_applies_what_it_finds():
    port, x = _CountedGets(), vectors(4, 3)
    writer, reader = process(port), process(port)
    writer.add(["a"], x[:1])
    assert reader.candidates(x[0], 2) == ["a"]
    port.crash_at_put = port.puts + 2  # the next add writes its segment, then dies writing its head
    with pytest.raises(CrashAt):
        writer.add(["b"], x[1:2])
    port.gets.clear()
    found, probe = reader.candidates_probing(x[1], 2)
    assert found == ["a"] and probe is not None and port.gets == []  # the heads show nothing new: no read yet
    assert reader.probed(probe, port.get([*probe.ids, "some-record"]))  # the caller's one read: records and log
    assert reader.index.search(x[1], 2) == ["b", "a"] and len(port.gets) == 2  # and the segment after it
    found, probe = reader.candidates_probing(x[1], 2)
    assert found == ["b", "a"] and probe is not None and not reader.probed(probe, port.get(probe.ids))


def test_a_probe_finished_after_the_process_read_the_log_reads_it_again():
    port, x = MemoryPort(), vectors(4, 5)
    writer, reader = process(port), process(port)
    writer.add(["a"], x[:1])
    reader.candidates(x[0], 1)
    _, probe = reader.candidates_probing(x[1], 2)
    assert probe is not None
    writer.add(["b"], x[1:2])
    reader.add(["c"], x[2:3])  # its write reads the log: what the probe was taken against has changed
    assert reader.probed(probe, []) is False and reader.index.search(x[1], 3)[0] == "b"  # nothing lost
    assert len(reader) == 3
