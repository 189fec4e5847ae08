"""Compaction in the background: the write that makes one due starts it and returns, and writes go on.

Every interleaving is forced, never timed: the port holds the compaction's thread at a chosen store call (storing
the snapshot, or deleting the segments it covers) on a :class:`threading.Event` until the test releases it, or
fails that call. :data:`DEADLINE` only bounds a broken implementation (a hang fails instead of blocking the suite);
no assertion depends on how long anything takes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence

import pytest
from _store_index_helpers import kinds, process, vectors, write_in_batches

from textcrafter_rag.sealed import PortRecord, StoreIndex
from textcrafter_rag.sealed.background import NICE_STEP
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.testing.memory_port import CrashAt, MemoryPort

#: Seconds a held call waits for the test, and the test for the compaction, before the test fails.
DEADLINE = 20.0


class GatedPort(MemoryPort):
    """A :class:`MemoryPort` that two threads may call (one call at a time), whose calls from any thread but the
    test's can be held at a gate (:meth:`hold`) or failed (:attr:`fail`)."""

    #: One call at a time (:attr:`_mutex`): the core may call it from its compaction's thread.
    concurrent_calls = True

    def __init__(self) -> None:
        super().__init__()
        self.tester = threading.current_thread()
        self._mutex = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()
        self._hold: str | None = None
        #: Set when a call reached the held point; :attr:`held_by` is the thread that made it.
        self.held = threading.Event()
        self.held_by: threading.Thread | None = None
        #: The kind of record ("snap", "head") whose next put from another thread raises.
        self.fail: str | None = None

    def hold(self, point: str) -> None:
        """Hold the next ``"snapshot"`` put, or ``"deletes"`` of covered segments, made by another thread."""
        self._hold = point
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def _at(self, point: str) -> None:
        if self._hold != point or self._gate.is_set():
            return
        self.held_by = threading.current_thread()
        self.held.set()
        if self.held_by is not self.tester and not self._gate.wait(DEADLINE):
            raise RuntimeError("the test never released the held compaction (it waited for the compaction)")

    def put(self, records: Sequence[PortRecord]) -> None:
        kind = records[0].fields.get(LOG_FIELD) if records else None
        if threading.current_thread() is not self.tester and kind is not None and kind == self.fail:
            self.fail = None
            raise CrashAt(f"the store refused a {kind} record")
        if kind == "snap":
            self._at("snapshot")
        with self._mutex:
            super().put(records)

    def delete(self, ids: Sequence[str]) -> None:
        with self._mutex:
            segments = any(i in self.records and self.records[i].fields.get(LOG_FIELD) == "seg" for i in ids)
        if segments:  # a compaction's clean-up (a write deletes only its previous head)
            self._at("deletes")
        with self._mutex:
            super().delete(ids)

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        with self._mutex:
            return super().get(ids)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        with self._mutex:
            return super().search(vector, k)


def compactions() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "textcrafter-compaction"]


def segment_held(port: GatedPort, index: StoreIndex, writer: str, seq: int) -> bool:
    return bool(port.get([index.log.records.chunk_id(writer, seq, 0)]))


def test_a_write_returns_while_the_compaction_it_started_waits_at_the_store():
    port, x = GatedPort(), vectors(30, 20)
    writer = process(port, compact_every=20)
    port.hold("snapshot")
    write_in_batches(writer, x[:20], prefix="r")  # the second batch makes it due
    assert port.held.wait(DEADLINE)
    assert port.held_by is not threading.current_thread()  # stored by another thread, not by the write
    assert not writer.wait_compacted(timeout=0)  # still held at the store
    writer.add(["r20"], x[20:21])  # returns while the compaction waits
    writer.remove(["r0"])
    assert writer.candidates(x[20], 1) == ["r20"] and len(writer) == 20
    assert "snap" not in kinds(port) and writer.snapshots.written == 0
    port.release()
    assert writer.wait_compacted(DEADLINE)
    assert writer.snapshots.written == 1 and kinds(port)["snap"] >= 1


@pytest.mark.parametrize("point", ["snapshot", "deletes"])
def test_what_is_written_during_a_compaction_is_not_deleted_and_a_new_process_finds_it(point: str):
    port, x = GatedPort(), vectors(60, 21)
    writer, other = process(port, compact_every=30), process(port)
    write_in_batches(writer, x[:20], prefix="r")
    other.add([f"o{i}" for i in range(10)], x[:10] * -1)  # another writer, read by the compaction's refresh
    port.hold(point)
    write_in_batches(writer, x[20:30], prefix="r", first=20)  # due: its index and covers are taken here
    assert port.held.wait(DEADLINE)
    write_in_batches(writer, x[30:60], prefix="r", first=30)  # during the compaction
    writer.remove(["r3", "r35"])  # one entry the snapshot holds, one it does not
    other.add([f"o{i}" for i in range(10, 20)], x[10:20] * -1)  # the other writer's next head and segment
    assert writer.candidates(x[40], 1) == ["r40"]
    port.release()
    assert writer.wait_compacted(DEADLINE) and writer.snapshots.written == 1
    w, o = writer.log.writer, other.log.writer
    assert w is not None and o is not None
    covers, _ = writer.snapshots.read(writer.log.snapshot)
    assert covers[w] == 3 and covers[o] == 1  # exactly what was applied when the index was taken
    assert not any(segment_held(port, writer, w, s) for s in range(1, covers[w] + 1))  # covered: deleted
    assert all(segment_held(port, writer, w, s) for s in range(covers[w] + 1, writer.log.applied[w] + 1))
    assert segment_held(port, writer, o, 2)  # the other writer's segment written during the compaction
    fresh = process(port)
    expected = {f"r{i}" for i in range(60)} - {"r3", "r35"} | {f"o{i}" for i in range(20)}
    assert set(fresh.candidates(x[0], 100)) == expected and fresh.snapshots.loaded == 1
    for i in (25, 30, 45, 59):
        assert fresh.candidates(x[i], 1) == [f"r{i}"]
    assert fresh.candidates(x[15] * -1, 1) == ["o15"]


@pytest.mark.parametrize("step", ["snap", "head"])
def test_a_compaction_that_fails_in_the_background_loses_nothing_and_a_later_one_succeeds(
    step: str, caplog: pytest.LogCaptureFixture
):
    port, x = GatedPort(), vectors(40, 22)
    writer = process(port, compact_every=20)
    port.fail = step  # storing the snapshot fails, or the head that would name it
    with caplog.at_level(logging.WARNING, logger="textcrafter_rag"):
        write_in_batches(writer, x[:20], prefix="r")
        assert writer.wait_compacted(DEADLINE)
    assert "compacting the sealed index failed" in caplog.text and port.fail is None
    assert writer.snapshots.written == 0 and kinds(port)["seg"] >= 2  # nothing it would cover was deleted
    assert set(process(port).candidates(x[0], 40)) == {f"r{i}" for i in range(20)}
    write_in_batches(writer, x[20:30], prefix="r", first=20)  # still due: this write starts it again
    assert writer.wait_compacted(DEADLINE) and writer.snapshots.written == 1
    assert kinds(port)["snap"] == writer.log.snapshot["chunks"]  # the failed attempt's chunks are gone
    fresh = process(port)
    assert set(fresh.candidates(x[0], 40)) == {f"r{i}" for i in range(30)} and fresh.snapshots.loaded == 1


def test_one_compaction_runs_at_a_time_and_a_skipped_one_runs_at_a_later_write():
    port, x = GatedPort(), vectors(50, 23)
    writer = process(port, compact_every=10)
    port.hold("snapshot")
    write_in_batches(writer, x[:10], prefix="r")  # due: it starts, and waits at the store
    assert port.held.wait(DEADLINE)
    write_in_batches(writer, x[10:40], prefix="r", first=10)  # due three more times: skipped while it runs
    assert len(compactions()) == 1
    port.release()
    assert writer.wait_compacted(DEADLINE) and writer.snapshots.written == 1
    covers, _ = writer.snapshots.read(writer.log.snapshot)
    assert covers[writer.log.writer] == 1
    writer.add(["r40"], x[40:41])  # the entries written meanwhile are still due
    assert writer.wait_compacted(DEADLINE) and writer.snapshots.written == 2
    fresh = process(port)
    assert len(fresh.candidates(x[0], 50)) == 41 and fresh.snapshots.loaded == 1


def test_an_explicit_compact_waits_for_the_background_one_then_writes_its_own():
    port, x = GatedPort(), vectors(30, 24)
    writer = process(port, compact_every=20)
    port.hold("snapshot")
    write_in_batches(writer, x[:20], prefix="r")
    assert port.held.wait(DEADLINE)
    writer.add(["late"], x[20:21])
    done: list[bool] = []
    explicit = threading.Thread(target=lambda: done.append(writer.compact()))
    explicit.start()
    port.release()
    explicit.join(DEADLINE)
    assert done == [True] and writer.snapshots.written == 2
    covers, _ = writer.snapshots.read(writer.log.snapshot)
    w = writer.log.writer
    assert covers[w] == 4 == writer.log.applied[w] - 1  # two batches, the late write, the first pointer; not its own
    fresh = process(port)
    assert fresh.candidates(x[20], 1) == ["late"] and len(fresh) == 21 and fresh.snapshots.loaded == 1


def test_a_write_waits_for_the_index_s_copy_only_never_for_its_serialization(monkeypatch: pytest.MonkeyPatch):
    """At ten million records FAISS's serialization of the index took over a second, and every write waited for it
    while the compaction held the lock through it. Here the serialization waits for the test: the write returns
    meanwhile, so it never waited (held through it, the write would return only once the serialization gave up)."""
    port, x = GatedPort(), vectors(700, 25)
    writer = process(port, train_at=300, background_training=False)  # trained in the write that crosses it
    write_in_batches(writer, x[:600], prefix="r", batch=100)
    assert writer.index.trained
    faiss, entered, go, gave_up = writer.index.faiss, threading.Event(), threading.Event(), threading.Event()

    class HeldSerialization:
        """FAISS, whose serialization waits until the test lets it go."""

        def __getattr__(self, name: str):
            return getattr(faiss, name)

        def serialize_index(self, index):
            entered.set()
            if not go.wait(DEADLINE):
                gave_up.set()
            return faiss.serialize_index(index)

    monkeypatch.setattr(writer.index, "faiss", HeldSerialization())
    compaction = threading.Thread(target=writer.compact)
    compaction.start()
    assert entered.wait(DEADLINE)
    writer.add(["late"], x[600:601])
    assert compaction.is_alive() and not gave_up.is_set()  # returned while the copy was being serialized
    assert writer.candidates(x[600], 1) == ["late"]
    go.set()
    compaction.join(DEADLINE)
    assert not compaction.is_alive() and writer.snapshots.written == 1
    covers, _ = writer.snapshots.read(writer.log.snapshot)
    assert covers[writer.log.writer] == 6  # the six batches; the late write is past it, in the log
    fresh = process(port)
    assert fresh.candidates(x[600], 1) == ["late"] and len(fresh) == 601 and fresh.snapshots.loaded == 1


class PriorityPort(GatedPort):
    """A :class:`GatedPort` that notes the nice value of the compaction thread at each of its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    def _note(self, call: str) -> None:
        if threading.current_thread().name == "textcrafter-compaction":
            self.seen.append((call, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    def put(self, records: Sequence[PortRecord]) -> None:
        self._note(str(records[0].fields.get(LOG_FIELD)) if records else "")
        super().put(records)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        self._note("search")
        return super().search(vector, k)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a nice value of each thread is Linux's")
def test_a_background_compaction_copies_at_the_caller_s_priority_and_stores_at_a_lower_one():
    """The copy, under the lock that writes take, runs at the caller's priority (a lowered thread holding it would
    keep the writes waiting on it); from the serialization on, the compaction's thread yields the CPU to them."""
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if base >= 19:
        pytest.skip("the tests already run at the lowest priority: nothing to lower")
    port, x = PriorityPort(), vectors(30, 26)
    writer = process(port, compact_every=0)
    write_in_batches(writer, x[:20], prefix="r")
    port.hold("snapshot")
    assert writer.compact(wait=False)
    assert port.held.wait(DEADLINE)
    assert not writer.compact(wait=False)  # one runs: none started
    port.release()
    assert writer.wait_compacted(DEADLINE) and writer.snapshots.written == 1
    lowered = min(19, base + NICE_STEP)
    assert ("search", base) in port.seen  # the heads read under the lock, before the copy
    assert {nice for call, nice in port.seen if call == "snap"} == {lowered}
    assert port.seen.index(("search", base)) < port.seen.index(("snap", lowered))
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's thread is untouched
    fresh = process(port)
    assert set(fresh.candidates(x[0], 30)) == {f"r{i}" for i in range(20)} and fresh.snapshots.loaded == 1
