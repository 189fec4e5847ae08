"""Compaction of the store-held index's log into sealed snapshots, over a dict-backed port.

Each property is forced at a chosen point (a reader left behind before a compaction, a chunk edited, a segment
deleted that no snapshot covers), never by timing.
"""

from __future__ import annotations

import importlib.util
import threading
import tracemalloc
from collections.abc import Sequence

import numpy as np
import pytest
from _store_index_helpers import DIM, KEY, kinds, process, vectors, write_in_batches

from textcrafter_rag.sealed import IndexRollbackError, IndexTamperedError, PortRecord, StoreIndex, StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.log_records import LOG_WRITE_BATCH
from textcrafter_rag.sealed.port import concurrent_calls, serves_concurrent_calls
from textcrafter_rag.sealed.replica import Replica
from textcrafter_rag.testing.memory_port import MemoryPort


class CountingPort(MemoryPort):
    """Counts the log segments' first chunks that reads ask for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        got = super().get(ids)
        self.asked += sum(1 for r in got if r.fields.get(LOG_FIELD) == "seg")
        return got


def test_a_new_process_opens_from_the_snapshot_and_reads_only_the_segments_past_it():
    port, x = CountingPort(), vectors(200, 0)
    writer = process(port)
    write_in_batches(writer, x[:150], prefix="r")
    assert kinds(port)["seg"] == 15
    assert writer.compact()
    assert kinds(port)["seg"] == 1  # the fifteen covered segments are deleted; the pointer's empty one remains
    assert kinds(port)["snap"] >= 1
    other = process(port)
    other.add([f"r{i}" for i in range(150, 200)], x[150:])  # a second writer, after the snapshot
    port.asked = 0
    reader = process(port)
    for i in (0, 77, 149, 150, 199):
        assert reader.candidates(x[i], 1) == [f"r{i}"]
    assert len(reader) == 200
    assert reader.snapshots.loaded == 1
    assert port.asked == 2  # the pointer's empty segment and the second writer's one: not the fifteen


def test_a_reader_left_behind_by_a_compaction_restores_from_the_snapshot():
    port, x = MemoryPort(), vectors(100, 1)
    writer, behind = process(port), process(port)
    write_in_batches(writer, x[:30], prefix="r")
    assert len(behind.candidates(x[0], 30)) == 30  # it has read the first three segments
    write_in_batches(writer, x[30:], prefix="r", first=30)
    writer.remove(["r5"])
    assert writer.compact()  # deletes segments 4-11 that the reader never read
    found = behind.candidates(x[40], 100)
    assert found[0] == "r40" and len(found) == 99 and "r5" not in found
    assert behind.snapshots.loaded == 1


def test_deletes_and_replacements_before_the_snapshot_hold_in_a_new_process():
    port, x = MemoryPort(), vectors(40, 2)
    writer = process(port)
    write_in_batches(writer, x[:20], prefix="r")
    writer.remove(["r3", "r4"])
    writer.add(["r7"], x[30:31])  # r7 now has another vector
    writer.compact()
    reader = process(port)
    assert "r3" not in reader.candidates(x[3], 20) and len(reader) == 18
    assert reader.candidates(x[30], 1) == ["r7"]


def test_a_trained_index_round_trips_through_a_snapshot():
    port, x = MemoryPort(), vectors(700, 3)
    writer = process(port, train_at=300, background_training=False)
    write_in_batches(writer, x, prefix="r", batch=100)
    assert writer.index.trained
    writer.compact()
    reader = process(port, train_at=300, background_training=False)
    assert reader.candidates(x[0], 5) == writer.candidates(x[0], 5)
    assert reader.index.trained and len(reader) == 700
    assert reader.snapshots.loaded == 1


def test_compaction_runs_by_itself_after_compact_every_entries_and_inline_when_asked():
    port, x = MemoryPort(), vectors(60, 4)
    writer = process(port, compact_every=25, background_compaction=False)  # in the write: no thread to wait for
    write_in_batches(writer, x[:20], prefix="r")
    assert "snap" not in kinds(port)
    write_in_batches(writer, x[20:30], prefix="r", first=20)
    assert writer.snapshots.written == 1 and "snap" in kinds(port)
    write_in_batches(writer, x[30:60], prefix="r", first=30)
    assert writer.snapshots.written == 2
    snaps = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "snap"]
    assert len(snaps) == 1  # the writer's previous snapshot was deleted
    assert len(process(port).candidates(x[0], 60)) == 60


class _ThreadedPort(MemoryPort):
    """A :class:`MemoryPort` that records the threads calling it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def put(self, records):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        super().put(records)

    def delete(self, ids):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        super().delete(ids)


def test_a_store_that_does_not_take_calls_from_two_threads_is_compacted_in_the_write_that_makes_it_due():
    """In-process engines (Qdrant local: a search failed while another thread compacted, at a million records)
    say nothing, and the core then never calls them from a thread of its own; a port that says
    ``concurrent_calls = True`` (a server's client) is compacted in the background."""
    for concurrent in (False, True):
        port, x = _ThreadedPort(), vectors(30, 4)
        port.concurrent_calls = concurrent  # type: ignore[attr-defined]
        writer = process(port, compact_every=25)  # background_compaction: the default
        assert writer.background is concurrent
        write_in_batches(writer, x, prefix="r")
        assert writer.wait_compacted(20.0) and writer.snapshots.written == 1
        called_from = port.threads - {threading.current_thread().name}
        assert called_from == ({"textcrafter-compaction"} if concurrent else set())


def test_a_server_s_client_is_told_from_an_in_process_engine() -> None:
    qdrant = pytest.importorskip("qdrant_client")
    chromadb = pytest.importorskip("chromadb")
    local = qdrant.QdrantClient(location=":memory:")
    assert not serves_concurrent_calls(local)
    assert serves_concurrent_calls(qdrant.QdrantClient(url="http://127.0.0.1:9"))  # no request is made
    assert not serves_concurrent_calls(chromadb.EphemeralClient())
    assert not serves_concurrent_calls(MemoryPort()) and not concurrent_calls(MemoryPort())
    if importlib.util.find_spec("langchain_qdrant") is not None:
        from langchain_core.embeddings import FakeEmbeddings
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import models

        local.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        assert not serves_concurrent_calls(
            QdrantVectorStore(client=local, collection_name="c", embedding=FakeEmbeddings(size=4))
        )


def test_an_edited_snapshot_is_refused():
    port, x = MemoryPort(), vectors(20, 5)
    writer = process(port)
    writer.add([f"r{i}" for i in range(20)], x)
    writer.compact()
    (snap,) = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "snap"]
    port.records[snap.id] = PortRecord(snap.id, snap.text[:-8] + "AAAAAAAA", snap.fields, snap.vector)
    with pytest.raises(IndexTamperedError):
        process(port).candidates(x[0], 1)


def test_a_segment_deleted_past_the_snapshot_is_still_a_rollback():
    port, x = MemoryPort(), vectors(40, 6)
    writer = process(port)
    write_in_batches(writer, x[:20], prefix="r")
    writer.compact()
    write_in_batches(writer, x[20:40], prefix="r", first=20)  # segments past the snapshot: no snapshot covers them
    w = writer.log.writer
    assert w is not None
    port.delete([writer.log.records.chunk_id(w, writer.log.applied[w] - 1, 0)])
    with pytest.raises(IndexRollbackError):
        process(port).candidates(x[0], 1)


def test_a_replica_opened_from_a_snapshot_holds_every_record():
    port, x = MemoryPort(), vectors(30, 7)
    writer = process(port)
    for i in range(30):
        port.put([PortRecord(f"r{i}", f"sealed {i}", {}, x[i].tolist())])
    write_in_batches(writer, x, prefix="r")
    writer.compact()
    reader = process(port)
    replica = Replica(fetch=port.get, fields=_fields, open_vector=_open_vector)
    reader.listeners.append(replica.apply)
    reader.resets.append(replica.reset)
    reader.refresh()
    assert replica.pending == 30
    assert replica.sync() == 30 and len(replica) == 30 and replica.pending == 0


def _fields(records: Sequence[PortRecord]) -> list[tuple]:
    return [(r.id, r.id, r.vector, None, r.text) for r in records]


def _open_vector(token, *, record_id, record_text=None) -> np.ndarray:
    return np.asarray(token, dtype=np.float32)


def test_covered_heads_are_deleted_and_a_writer_that_writes_again_is_found():
    port, x = MemoryPort(), vectors(40, 8)
    compactor, quiet = process(port), process(port)
    compactor.add([f"a{i}" for i in range(10)], x[:10])
    quiet.add([f"b{i}" for i in range(10)], x[10:20])
    reader = process(port)
    assert len(reader.candidates(x[0], 40)) == 20
    compactor.compact()
    heads = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "head"]
    assert len(heads) == 1  # the quiet writer's head is covered by the snapshot: only the compactor's remains
    fresh = process(port)
    assert len(fresh.candidates(x[0], 40)) == 20 and fresh.log.searched_heads.keys() == {compactor.log.writer}
    quiet.add(["b10"], x[20:21])  # its next head; deleting its previous one (gone already) is not an error
    for r in (fresh, reader, process(port)):
        assert r.candidates(x[20], 1) == ["b10"] and len(r) == 21


def test_the_tenant_keyword_and_its_deprecated_name():
    port, x = MemoryPort(), vectors(3, 9)
    process(port).add(["a", "b", "c"], x)
    with pytest.warns(DeprecationWarning, match="tenant="):
        old = StoreIndex(KEY, context="t", options=StoreIndexSearch(), port=port, dim=DIM)
    assert old.candidates(x[1], 1) == ["b"]  # the same tenant under its old name
    other = StoreIndex(KEY, tenant="u", options=StoreIndexSearch(), port=port, dim=DIM)
    assert other.candidates(x[1], 1) == []


def test_a_forged_chunk_count_is_a_missing_chunk_not_a_huge_allocation():
    port, x = MemoryPort(), vectors(20, 10)
    process(port).add([f"r{i}" for i in range(20)], x)
    (first,) = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg"]
    port.records[first.id] = PortRecord(first.id, first.text, {**first.fields, "_tc_chunks": "1000000"}, first.vector)
    reader = process(port)
    tracemalloc.start()
    try:
        with pytest.raises(IndexRollbackError, match="missing chunks"):  # the plain count is the host's to edit
            reader.candidates(x[0], 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # not a million chunks' worth of buffer (a ~1 KB chunk: over 1 GB)


class KeepsEverything(MemoryPort):
    """A store whose deletes fail: a compaction's covered segments stay (deletes are best effort)."""

    def delete(self, ids: Sequence[str]) -> None:
        raise OSError("deletes refused")


def test_a_process_opened_from_a_snapshot_writes_after_every_write_the_snapshot_holds(monkeypatch):
    """B's clock runs an hour ahead; B's delete of "x" is in a snapshot, and stays in the log (deletes failed). A
    process opened from the snapshot on a slow clock re-adds "x": a reader that reads both must keep "x" (the
    opened process's clock passed B's when it read the empty segment that made the snapshot durable)."""
    port, x = KeepsEverything(), vectors(1, 12)
    now = {"t": 10**18}
    monkeypatch.setattr("textcrafter_rag.sealed.log.time.time_ns", lambda: now["t"])
    a = process(port)
    a.add(["x"], x)
    reader = process(port)
    assert reader.candidates(x[0], 1) == ["x"]  # it applied the add, not yet the delete
    now["t"] += 3_600 * 10**9
    process(port).remove(["x"])  # B
    assert process(port).compact()  # the snapshot holds B's delete; its segment stays
    now["t"] -= 3_600 * 10**9 - 1
    opened = process(port)
    assert opened.candidates(x[0], 1) == [] and opened.snapshots.loaded == 1  # from the snapshot, not B's segment
    opened.add(["x"], x)
    assert reader.candidates(x[0], 1) == ["x"]  # merged B's delete, then the re-add


class CallSizes(MemoryPort):
    """Records how many log records each write or delete call carried (a server's client, or an in-process store)."""

    def __init__(self, *, server: bool = True) -> None:
        super().__init__()
        self.concurrent_calls = server
        self.log_puts: list[int] = []
        self.deletes: list[int] = []

    def put(self, records: Sequence[PortRecord]) -> None:
        self.log_puts.append(sum(1 for r in records if r.fields.get(LOG_FIELD) is not None))
        super().put(records)

    def delete(self, ids: Sequence[str]) -> None:
        self.deletes.append(len(ids))
        super().delete(ids)


@pytest.mark.parametrize("server", [True, False])
def test_log_records_are_written_and_deleted_a_few_per_call_to_a_server(server):
    """A Chroma server holds every search while it stores or deletes: a segment, a snapshot and a compaction's
    clean-up go in calls of at most LOG_WRITE_BATCH records, so searches get through in between. An in-process
    store, which serves no other process, takes 64 a call."""
    batch = LOG_WRITE_BATCH if server else 64
    port, x = CallSizes(server=server), vectors(600, 9)
    writer = process(port, segment_chars=2048)
    write_in_batches(writer, x, prefix="r", batch=600)  # one segment of more than LOG_WRITE_BATCH chunks
    assert LOG_WRITE_BATCH < kinds(port)["seg"] < 64
    assert max(port.log_puts) == min(batch, kinds(port)["seg"])  # a server's: in several calls
    port.log_puts.clear()
    assert writer.compact()
    assert max(port.log_puts) == min(batch, kinds(port)["snap"])  # the snapshot's chunks
    assert max(port.deletes) == min(batch, sum(port.deletes) - 1)  # the covered segment (and a head alone)
    fresh = process(port, segment_chars=2048)
    assert fresh.candidates(x[123], 1) == ["r123"] and len(fresh) == 600
