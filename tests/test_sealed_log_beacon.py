"""The index log's beacon, over a dict-backed port whose ``put`` replaces: a search reads it by id with its records
and searches the heads only when a write was made since; nothing acknowledged is missed, a restored backup is
still detected, and a beacon that is missing, forged or read empty counts as a change."""

from __future__ import annotations

import numpy as np
import pytest
from _store_index_helpers import kinds, process, vectors

from textcrafter_rag.sealed import IndexRollbackError, PortRecord, StoreIndex
from textcrafter_rag.sealed.port import is_one_of, replaces_records
from textcrafter_rag.testing.memory_port import CrashAt, MemoryPort


class _CountedSearches(MemoryPort):
    """A :class:`MemoryPort` that counts its searches (a search of the heads is the only search the log makes)."""

    def __init__(self, **options) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**options)
        self.searches = 0

    def search(self, vector, k):  # type: ignore[no-untyped-def]
        self.searches += 1
        return super().search(vector, k)


def _search(index: StoreIndex, port: MemoryPort, query: np.ndarray, k: int) -> list[str]:
    """A search as the sealed stores make it: the log's read left to the one read of the records (here, by id)."""
    found, probe = index.candidates_probing(query, k)
    if probe is not None and index.probed(probe, port.get([*found, *probe.ids])):
        found = index.index.search(query, k)
    return found


def _settled(port: _CountedSearches, x: np.ndarray) -> StoreIndex:
    """A reader that has read the log, and the beacon before its last search of the heads."""
    reader = process(port)
    assert _search(reader, port, x[0], 1) == ["a"]  # nothing applied yet: the heads are searched
    assert _search(reader, port, x[0], 1) == ["a"]  # the beacon read first, then the heads: its value is seen
    return reader


def test_writes_overwrite_one_beacon_only_on_a_port_that_replaces():
    x = vectors(3, 0)
    for replaces, beacons in ((True, 1), (False, 0)):
        port = MemoryPort(replaces_records=replaces)
        writer = process(port)
        writer.add(["a"], x[:1])
        writer.add(["b"], x[1:2])
        assert kinds(port).get("beacon", 0) == beacons and kinds(port)["head"] == 1


def test_a_quiet_search_searches_no_heads_and_a_write_is_found_at_the_next_search():
    port, x = _CountedSearches(replaces_records=True), vectors(4, 1)
    writer = process(port)
    writer.add(["a"], x[:1])
    reader = _settled(port, x)
    before = port.searches
    for _ in range(3):
        assert _search(reader, port, x[1], 2) == ["a"]
    assert port.searches == before  # the beacon read with the records said: nothing written since
    writer.add(["b"], x[1:2])
    before = port.searches  # (the writer's add read the log too)
    assert _search(reader, port, x[1], 2) == ["b", "a"]  # acknowledged before this search began: found by it
    assert port.searches == before + 1
    other = process(port)  # a writer the reader never saw: only its head names it
    other.add(["c"], x[2:3])
    assert _search(reader, port, x[2], 1) == ["c"] and len(reader) == 3


def test_without_a_beacon_every_search_searches_the_heads():
    port, x = _CountedSearches(), vectors(2, 2)
    process(port).add(["a"], x[:1])
    reader = _settled(port, x)
    before = port.searches
    for _ in range(3):
        _search(reader, port, x[0], 1)
    assert port.searches >= before + 3


def test_a_store_restored_from_an_older_copy_is_detected_at_the_next_search():
    port, x = _CountedSearches(replaces_records=True), vectors(3, 3)
    writer = process(port)
    writer.add(["a"], x[:1])
    reader = _settled(port, x)
    backup = dict(port.records)
    writer.add(["b"], x[1:2])
    assert _search(reader, port, x[1], 1) == ["b"]
    port.records = backup  # the host puts the whole older copy back: its older beacon with it
    with pytest.raises(IndexRollbackError):
        _search(reader, port, x[1], 1)


def test_heads_rolled_back_under_the_beacon_lose_nothing_and_are_detected_at_the_next_write():
    port, x = _CountedSearches(replaces_records=True), vectors(4, 4)
    writer = process(port)
    writer.add(["a"], x[:1])
    reader = _settled(port, x)
    old_head = {i: r for i, r in port.records.items() if r.fields.get("_tc_log") == "head"}
    writer.add(["b"], x[1:2])
    assert _search(reader, port, x[1], 1) == ["b"]
    w = writer.log.writer
    port.delete([writer.log.records.head_id(w, 2), writer.log.records.chunk_id(w, 2, 0)])
    port.records.update(old_head)  # the older head put back, the beacon left as it was
    assert _search(reader, port, x[1], 2) == ["b", "a"]  # the reader keeps what it holds
    process(port).add(["c"], x[2:3])  # the next write changes the beacon: the heads are searched
    with pytest.raises(IndexRollbackError):
        _search(reader, port, x[2], 1)


@pytest.mark.parametrize("change", ["deleted", "forged", "read empty"])
def test_a_beacon_missing_forged_or_read_empty_is_a_change_and_removes_nothing(change: str):
    port, x = _CountedSearches(replaces_records=True), vectors(3, 5)
    writer = process(port)
    writer.add(["a"], x[:1])
    reader = _settled(port, x)
    bid = reader.log.beacon.id
    if change == "deleted":
        port.delete([bid])
    elif change == "forged":
        held = port.records[bid]
        port.records[bid] = PortRecord(bid, held.text[:-8] + "AAAAAAAA", held.fields, held.vector)
    before = port.searches
    if change == "read empty":
        _, probe = reader.candidates_probing(x[0], 1)
        assert probe is not None and not reader.probed(probe, [])
    else:
        assert _search(reader, port, x[0], 1) == ["a"]
    assert port.searches == before + 1 and len(reader) == 1  # the heads were searched; the entry stays


def test_a_writer_killed_between_its_head_and_the_beacon_is_read_one_past_its_head_as_without_a_beacon():
    port, x = _CountedSearches(replaces_records=True), vectors(4, 6)
    writer = process(port)
    writer.add(["a"], x[:1])
    reader = _settled(port, x)
    port.crash_at_put = port.puts + 3  # segment, head, then the beacon's put fails: the add raises
    with pytest.raises(CrashAt):
        writer.add(["b"], x[1:2])
    before = port.searches
    # not acknowledged (its records were never stored), yet its entry is read with the records, one past the head
    # this reader knew: a search skips and counts an entry without a record, and never stores one without an entry
    assert _search(reader, port, x[1], 1) == ["b"] and port.searches == before and len(reader) == 2
    process(port).add(["c"], x[2:3])
    assert _search(reader, port, x[2], 1) == ["c"] and len(reader) == 3


def test_a_port_tells_a_store_class_and_its_subclasses_by_module_and_name():
    upserting = type("Chroma", (), {"__module__": "langchain_chroma.vectorstores"})
    counted = type("CountedChroma", (upserting,), {"__module__": "my_app.stores"})
    other = type("Chroma", (), {"__module__": "my_app.stores"})
    classes = [("langchain_chroma.", "Chroma")]
    assert is_one_of(upserting(), classes) and is_one_of(counted(), classes)  # a subclass of it too
    assert not is_one_of(other(), classes) and not is_one_of(object(), classes)  # the name alone is not enough
    assert replaces_records(MemoryPort(replaces_records=True)) and not replaces_records(MemoryPort())
