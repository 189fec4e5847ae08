"""The local replica of the store-held index (``StoreIndexSearch(replica=True)``), over a recording dict port.

Each test drives two "processes" (two cores over one store) through the adapters' order of writes (log, then
records) and reads (candidates, then records), and forces the interleaving it tests at a chosen point: never
by timing. The recording port is the store's view: it proves what a query reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidTypeError
from textcrafter_rag.sealed import PortRecord, StoreIndexSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.records import ID_FIELD
from textcrafter_rag.sealed.replica import Replica
from textcrafter_rag.sealed.sizing import OPEN_K_MOST
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

KEY = SecretKey(bytes(range(32)))
DIM = 16


def vectors(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class RecordingPort(MemoryPort):
    """A dict store that records every request it answers, as the store's operator sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, tuple[str, ...]]] = []

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        self.requests.append(("get", tuple(ids)))
        return super().get(ids)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        self.requests.append(("search", (str(k), repr(np.round(np.asarray(vector), 6).tolist()))))
        return super().search(vector, k)

    def data_ids(self) -> set[str]:
        return {i for i, r in self.records.items() if LOG_FIELD not in r.fields}

    def data_reads(self) -> list[str]:
        """The ids of data records that reads asked for (log records and probes of absent ids excluded)."""
        data = self.data_ids()
        return [i for kind, ids in self.requests if kind == "get" for i in ids if i in data]


class Process:
    """One process's sealed store over the port, in the adapters' order (a thin stand-in for an adapter)."""

    def __init__(self, port: MemoryPort, *, replica: bool) -> None:
        self.port = port
        self.core = SealedSearch(KEY, context="t", options=StoreIndexSearch(replica=replica))
        self.core.attach(port)

    def log(self, ids: list[str], clean: np.ndarray) -> None:
        """The first half of an add: the index entries (segment and head), before the store takes the records."""
        self.core.index_add(ids, clean)

    def store(self, ids: list[str], clean: np.ndarray, version: str = "v1") -> None:
        """The second half of an add: the sealed records."""
        texts = [f"sealed:{i}:{version}" for i in ids]
        fields = self.core.record_fields(clean, ids, texts)
        keyed = self.core.store_vectors(clean, ids)
        self.port.put(
            [
                PortRecord(i, t, {**f, ID_FIELD: i}, v.tolist())
                for i, t, f, v in zip(ids, texts, fields, keyed, strict=True)
            ]
        )

    def add(self, ids: list[str], clean: np.ndarray, version: str = "v1") -> None:
        self.log(ids, clean)
        self.store(ids, clean, version)

    def delete(self, ids: list[str]) -> None:
        self.port.delete(ids)  # the records first, then the tombstones
        self.core.index_remove(ids)

    def search(self, query: np.ndarray, k: int = 3) -> list[tuple[str, str]]:
        """``(id, text)`` of the best ``k``, read from the replica if there is one, else from the store."""
        ids = self.core.index_candidates(query)
        records = self.core.index_records(ids)
        if records is None:
            records = self.port.get(ids)
        self.core.count_dead(ids, len(records))
        from_port = [
            (r.id, r.fields.get(ID_FIELD), r.fields.get("_tc_vec"), r.fields.get("_tc_mode"), r.text) for r in records
        ]
        opened = self.core.open_hits(from_port)
        ranked = self.core.rank(query, opened.vectors, k)
        return [(opened.record_ids[i], records[opened.positions[i]].text) for i, _ in ranked]

    @property
    def replica(self) -> Replica:
        assert self.core.indexes is not None and self.core.indexes.replica is not None
        return self.core.indexes.replica


def test_with_the_replica_a_query_reads_no_record_and_every_query_reads_the_same():
    port, x = RecordingPort(), vectors(60, 0)
    Process(port, replica=False).add([f"r{i}" for i in range(60)], x)
    reader = Process(port, replica=True)
    assert reader.search(x[0])[0][0] == "r0"  # the first search reads every record once: the replica's open
    assert sorted(port.data_reads()) == sorted(port.data_ids())
    seen = []
    for i in (5, 17, 42):
        port.requests.clear()
        assert reader.search(x[i])[0][0] == f"r{i}"
        assert port.data_reads() == []  # no data record read: only the heads search and the log's probes
        seen.append(list(port.requests))
    assert seen[0] == seen[1] == seen[2]  # the store sees the same requests whatever the query


def test_without_the_replica_a_query_reads_its_records_and_the_reads_differ():
    port, x = RecordingPort(), vectors(300, 1)
    Process(port, replica=False).add([f"r{i}" for i in range(300)], x)
    reader = Process(port, replica=False)
    reads = []
    for i in (3, 150):
        port.requests.clear()
        assert reader.search(x[i])[0][0] == f"r{i}"
        reads.append(set(port.data_reads()))
    assert len(reads[0]) == len(reads[1]) == OPEN_K_MOST  # the whole pick (open_k unset: the most it opens)
    assert reads[0] != reads[1]  # the control: this is what the option hides


def test_a_record_logged_before_it_is_stored_stays_pending_and_is_found_at_the_next_sync():
    port, x = RecordingPort(), vectors(10, 2)
    writer, reader = Process(port, replica=False), Process(port, replica=True)
    writer.add(["a", "b"], x[:2])
    writer.log(["c"], x[2:3])  # the writer logged "c" and has not stored it yet (or crashed here)
    assert "c" not in [i for i, _ in reader.search(x[2])]
    assert reader.replica.pending == 1 and reader.core.dead >= 1  # counted, never removed from the index
    port.requests.clear()
    writer.store(["c"], x[2:3])  # now the store holds it (the add is acknowledged after this)
    assert reader.search(x[2])[0][0] == "c"  # found by the next search: no new segment needed
    assert ("get", ("c",)) in port.requests and reader.replica.pending == 0
    assert len(reader.core.store_index()) == 3


def test_a_tombstone_drops_the_record_and_the_pending_id():
    port, x = RecordingPort(), vectors(10, 3)
    writer, reader = Process(port, replica=False), Process(port, replica=True)
    writer.add([f"r{i}" for i in range(5)], x[:5])
    writer.log(["late"], x[5:6])
    reader.search(x[0])
    assert len(reader.replica) == 5 and reader.replica.pending == 1
    writer.delete(["r1", "late"])
    assert "r1" not in [i for i, _ in reader.search(x[1], k=5)]
    assert len(reader.replica) == 4 and reader.replica.pending == 0


def test_an_empty_answer_keeps_every_record_and_every_pending_id():
    port, x = RecordingPort(), vectors(10, 4)
    writer, reader = Process(port, replica=False), Process(port, replica=True)
    writer.add([f"r{i}" for i in range(5)], x[:5])
    reader.search(x[0])
    writer.add(["r5", "r6"], x[5:7])
    port.empty_answers = 1  # the next read answers nothing: a lagging replica or a malicious host
    reader.search(x[5])
    assert len(reader.replica) >= 5  # nothing the replica held was dropped
    assert reader.search(x[5])[0][0] == "r5"  # retried at the next sync
    assert len(reader.replica) == 7 and reader.replica.pending == 0


def test_a_re_added_record_read_between_its_log_and_its_store_is_read_again():
    port, x = RecordingPort(), vectors(10, 5)
    writer, reader = Process(port, replica=False), Process(port, replica=True)
    writer.add(["a", "b"], x[:2])
    assert reader.search(x[0])[0] == ("a", "sealed:a:v1")
    writer.log(["a"], x[7:8])  # "a" re-added with a new text: logged, the store still holds the old one
    assert reader.search(x[0])[0] == ("a", "sealed:a:v1")  # read the old version, which the log says is not it
    assert reader.replica.pending == 1
    writer.store(["a"], x[7:8], version="v2")
    assert reader.search(x[7])[0] == ("a", "sealed:a:v2")  # no new segment: the pending id was read again
    assert reader.replica.pending == 0


def test_the_writers_own_adds_are_read_into_its_replica_after_it_stored_them():
    port, x = RecordingPort(), vectors(10, 6)
    both = Process(port, replica=True)
    both.add(["a", "b", "c"], x[:3])
    assert both.search(x[1])[0][0] == "b"
    assert len(both.replica) == 3 and both.replica.pending == 0


def test_the_option_is_validated_and_off_by_default():
    assert StoreIndexSearch().replica is False
    with pytest.raises(InvalidTypeError):
        StoreIndexSearch(replica="yes")  # type: ignore[arg-type]
    assert Process(MemoryPort(), replica=False).core.index_records(["a"]) is None
