"""The world of ``benchmarks.sealed_search.access_patterns``: a store that records what it is asked, and an app.

* :class:`WatchedPort` is a dict store (:class:`~textcrafter_rag.testing.memory_port.MemoryPort`) that logs every
  request as its operator sees it: reads by id (the ids, in the order asked), searches (the vector), and writes
  (each record's id and size); each write (put or delete) is also kept in ``writes`` with the time it arrived.
  Its reads return fresh copies, as a real store deserialises, so a replica's memory is its own. Its search
  ranks the index log's heads exactly and then one other record: heads rank above every other record by
  construction (:mod:`textcrafter_rag.sealed.log`), so the core reads the same answer as from
  an exact search, at a cost that does not grow with the store (the benchmark times the app, not a dict scan).
* :class:`App` is one process's sealed store over that port, written and read in the adapters' order (an add is
  the engine's :func:`~textcrafter_rag.sealed.engine.add_records`: the log read, the entries logged, the sealed
  records, the log read again; a search: candidates, then the records from the replica or by id from the store),
  with the record sealing of :class:`~textcrafter_rag.sealed.records.RecordSealer` (padded AES-GCM texts, as the
  adapters store).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from textcrafter_rag.sealed import PortRecord, StoreIndexSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.engine import Query, add_records, run
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealed.replica import port_hit_fields
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

__all__ = ["App", "WatchedPort", "record_size"]


def record_size(r: PortRecord) -> int:
    """Characters a record puts in the store (its text and plain fields): what a host sees of a write's size."""
    return len(r.text) + sum(len(k) + len(v) for k, v in r.fields.items())


def _copy(r: PortRecord) -> PortRecord:
    return PortRecord((r.id + ".")[:-1], (r.text + ".")[:-1], {k: (v + ".")[:-1] for k, v in r.fields.items()})


class WatchedPort(MemoryPort):
    """A dict store that records every request (see the module docstring); ``watching`` switches the log."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, Any]] = []
        #: Every write as it arrived: ``(perf_counter seconds, "put" or "delete", [(id, size, log kind)])``.
        self.writes: list[tuple[float, str, list[tuple[str, int, str | None]]]] = []
        self.watching = True
        self._heads: dict[str, PortRecord] = {}
        self._other: str | None = None

    def put(self, records: Sequence[PortRecord]) -> None:
        if self.watching:
            seen = [(r.id, record_size(r), r.fields.get(LOG_FIELD)) for r in records]
            self.writes.append((time.perf_counter(), "put", seen))
            self.requests.append(("put", seen))
        for r in records:
            if r.fields.get(LOG_FIELD) == "head":
                self._heads[r.id] = r
            elif self._other is None:
                self._other = r.id
            # the vector is kept only where a search can need it (heads): a million lists of floats would not fit
            self.records[r.id] = r if r.fields.get(LOG_FIELD) == "head" else PortRecord(r.id, r.text, r.fields)

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        if self.watching:
            self.requests.append(("get", list(ids)))
        return [_copy(self.records[i]) for i in ids if i in self.records]

    def delete(self, ids: Sequence[str]) -> None:
        if self.watching:
            self.writes.append((time.perf_counter(), "delete", [(i, 0, None) for i in ids]))
            self.requests.append(("delete", list(ids)))
        for i in ids:
            self.records.pop(i, None)
            self._heads.pop(i, None)
            if i == self._other:
                self._other = next((j for j in self.records if j not in self._heads), None)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        if self.watching:
            self.requests.append(("search", (k, tuple(np.round(np.asarray(vector, dtype=np.float64), 6)))))
        q = np.asarray(vector, dtype=np.float64)
        heads = sorted(self._heads.values(), key=lambda r: -float(np.dot(q, np.asarray(r.vector))))
        other = [self.records[self._other]] if self._other is not None else []
        return [_copy(r) for r in (heads + other)[:k]]

    def data_ids(self) -> set[str]:
        return {i for i, r in self.records.items() if LOG_FIELD not in r.fields}


class App:
    """One process's sealed store (store-held index, with or without the replica) over ``port``."""

    def __init__(self, port: MemoryPort, key: bytes, *, replica: bool, context: str = "bench") -> None:
        secret = SecretKey(key)
        self.port, self.key = port, key
        self.core = SealedSearch(secret, tenant=context, options=StoreIndexSearch(replica=replica))
        self.core.attach(port)
        self.sealer = RecordSealer(secret, tenant=context)

    def records(self, ids: Sequence[str], texts: Sequence[str], clean: np.ndarray) -> list[PortRecord]:
        """The sealed records the store takes for these notes (keyed ids, padded sealed texts, sealed vectors)."""
        sealed = [self.sealer.seal(t, {}, record_id=i) for t, i in zip(texts, ids, strict=True)]
        store_ids = [str(s.store_id) for s in sealed]
        fields = self.core.record_fields(clean, store_ids, [s.text for s in sealed])
        return [
            PortRecord(sid, s.text, {**{k: v for k, v in s.metadata.items() if isinstance(v, str)}, **f})
            for sid, s, f in zip(store_ids, sealed, fields, strict=True)
        ]

    def add(self, ids: Sequence[str], texts: Sequence[str], clean: np.ndarray) -> list[str]:
        """The adapters' add, run by the engine's own driver (so the store sees what it sees from them, in their
        order): the log read, the entries logged, the records stored, then the log read again (the confirm that
        relogs an entry a racing delete removed); the store ids."""
        recs = self.records(ids, texts, clean)
        store_ids = [r.id for r in recs]
        run(add_records(self.core, store_ids, clean), write=lambda: self.port.put(recs))
        return store_ids

    def search(self, query: np.ndarray, k: int = 10) -> list[str]:
        """The store ids of the best ``k`` by exact cosine, as the adapters search: the mode's own steps, run by the
        engine's driver (the replica's records, or one read by id of the picked records with the log's last
        records), so the store sees what it sees from them."""
        core = self.core
        steps = core.search_mode.find(core, Query(query, k, port_hit_fields, records=list))
        found = run(steps, read=self.port.get)
        return [found.record_ids[i] for i, _ in core.rank(query, found.vectors, k)]
