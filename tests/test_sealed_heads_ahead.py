"""The heads searched beside a search's read of records (:meth:`IndexLog.probe_ahead`), on a store that takes two
calls at once: the search overlaps the read, and whatever the heads show is still read before ranking. Every
interleaving is forced (the heads' search waits for the records' read to start), never left to timing."""

from __future__ import annotations

import threading

import pytest
from _store_index_helpers import process, vectors

from textcrafter_rag.sealed import IndexRollbackError
from textcrafter_rag.sealed.segment import HeadsAhead, Probe
from textcrafter_rag.testing.memory_port import CrashAt, MemoryPort

#: How long the heads' search waits for the records' read before it gives up (a failure, never a pass).
_WAIT = 20.0


class TwoCallsPort(MemoryPort):
    """A store that takes two calls at once; its head searches wait until a read by id has started, once armed."""

    concurrent_calls = True

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.read_started = threading.Event()
        #: For each search made while armed: whether a read by id had started by the time it answered.
        self.overlapped: list[bool] = []

    def get(self, ids):  # type: ignore[no-untyped-def]
        self.read_started.set()
        return super().get(ids)

    def search(self, vector, k):  # type: ignore[no-untyped-def]
        if self.armed:
            self.overlapped.append(self.read_started.wait(_WAIT))
        return super().search(vector, k)

    def arm(self) -> None:
        self.armed = True
        self.read_started.clear()
        self.overlapped.clear()


def _search(reader, port: TwoCallsPort, query, k: int) -> tuple[list[str], bool]:  # type: ignore[no-untyped-def]
    """One search as the engine makes it: the pick, one read of records and log ids, then the settle."""
    found, probe = reader.candidates_probing(query, k)
    assert probe is not None and probe.ahead is not None
    changed = reader.probed(probe, port.get([*found, *probe.ids]))
    return (reader.index.search(query, k) if changed else found), changed


def _read_once(port: MemoryPort, x):  # type: ignore[no-untyped-def]
    """A writer that added "a", and a reader that has read the log once (a guess needs a first read)."""
    writer, reader = process(port), process(port)
    writer.add(["a"], x[:1])
    assert reader.candidates(x[0], 1) == ["a"]
    return writer, reader


def test_the_heads_are_searched_while_the_records_are_read():
    port, x = TwoCallsPort(), vectors(4, 40)
    writer, reader = process(port), process(port)
    writer.add(["a", "b"], x[:2])
    assert reader.candidates(x[0], 1) == ["a"]  # the first read: the whole log, no guess to make
    port.arm()
    found, changed = _search(reader, port, x[1], 1)
    assert found == ["b"] and not changed
    assert port.overlapped == [True]  # the heads' search answered only after the records' read had started


def test_what_another_writer_added_since_is_read_before_ranking():
    port, x = TwoCallsPort(), vectors(4, 41)
    writer, reader = _read_once(port, x)
    writer.add(["b"], x[1:2])  # acknowledged before the search starts: the search must return it
    port.arm()
    found, changed = _search(reader, port, x[1], 1)
    assert found == ["b"] and changed and port.overlapped == [True]


def test_a_new_writer_is_read_before_ranking():
    port, x = TwoCallsPort(), vectors(4, 42)
    _, reader = _read_once(port, x)
    process(port).add(["b"], x[1:2])  # a writer the reader's guess cannot name
    port.arm()
    assert _search(reader, port, x[1], 1) == (["b"], True)


def test_a_segment_written_without_its_head_is_read_by_the_guess():
    port, x = TwoCallsPort(), vectors(4, 43)
    writer, reader = _read_once(port, x)
    port.crash_at_put = port.puts + 2  # the next add writes its segment, then dies writing its head
    with pytest.raises(CrashAt):
        writer.add(["b"], x[1:2])
    port.arm()
    assert _search(reader, port, x[1], 1) == (["b"], True)


def test_a_rolled_back_head_fails_the_search_that_read_it():
    port, x = TwoCallsPort(), vectors(4, 44)
    writer, reader = _read_once(port, x)
    w = writer.log.writer
    old = port.records[writer.log.records.head_id(w, 1)]
    writer.add(["b"], x[1:2])
    assert reader.candidates(x[1], 1) == ["b"]
    port.records[old.id] = old  # the host puts the older head back, and deletes the newer head and segment
    port.delete([writer.log.records.head_id(w, 2), writer.log.records.chunk_id(w, 2, 0)])
    port.arm()
    found, probe = reader.candidates_probing(x[1], 1)
    assert probe is not None
    records = port.get([*found, *probe.ids])
    with pytest.raises(IndexRollbackError):
        reader.probed(probe, records)
    assert reader.index.search(x[1], 1) == ["b"]  # nothing was removed


def test_a_writer_the_guess_missed_is_read_once_the_heads_name_it():
    port, x = TwoCallsPort(), vectors(4, 45)
    writer, reader = _read_once(port, x)
    log = reader.log
    w = writer.log.writer
    crash = process(port)
    crash.add(["c"], x[2:3])  # its head is then lost: only a head naming its writer leads to it
    port.delete([crash.log.records.head_id(crash.log.writer, 1)])
    spare = log.probe_ahead()  # the guess a search makes: every writer this process knows
    assert spare is not None and spare.read_heads() == {w: 1}
    heads = {w: 1, crash.log.writer: 0}  # what a search of the heads gives once one names the lost writer
    guess = Probe(spare.ids, {}, dict(log.applied), log.epoch, HeadsAhead(lambda: heads))
    assert crash.log.records.chunk_id(crash.log.writer, 1, 0) not in guess.ids
    assert reader.probed(guess, port.get(guess.ids))
    assert reader.index.search(x[2], 1) == ["c"]


def test_a_store_that_takes_one_call_at_a_time_gets_no_thread():
    port, x = MemoryPort(), vectors(4, 46)
    _, reader = _read_once(port, x)
    _, probe = reader.candidates_probing(x[0], 1)
    assert probe is not None and probe.ahead is None and probe.heads  # the heads were read before the pick


def test_the_store_sees_the_same_log_reads_for_every_query_as_without_the_thread():
    """What the store learns of a search's log read does not depend on the query, nor on the path: with the heads
    searched ahead, each query's read by id asks for the same log ids as the one-call-at-a-time path's."""
    x = vectors(8, 47)
    asked: dict[str, list[set[str]]] = {}
    for name, port in (("ahead", TwoCallsPort()), ("in turn", MemoryPort())):
        writer, reader = _read_once(port, x)
        writer.add(["b", "c"], x[1:3])
        reader.candidates(x[0], 1)  # read what was written: the log is quiet from here
        data = {"a", "b", "c"}
        asked[name] = []
        for q in (x[0], x[5], x[7]):
            found, probe = reader.candidates_probing(q, 2)
            assert probe is not None and not reader.probed(probe, port.get([*found, *probe.ids]))
            asked[name].append(set(probe.ids) - data)
        assert asked[name][0] and all(ids == asked[name][0] for ids in asked[name])  # the same for every query
    assert [len(a) for a in asked["ahead"]] == [len(a) for a in asked["in turn"]]  # one id per writer either way
