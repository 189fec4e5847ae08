"""What each mode's store holds for the attack battery, and the releases an attacker can have made.

* The plain modes (``none``, candidates, the app-side index): the vectors the core computes for each record
  (:meth:`~.modes.Mode.store_docs`), one per record; that is all their stores hold that the battery attacks.
* The store-held index (``store-index``, ``store-index-replica``): a real store. :class:`HeldWorld` writes every
  record through the core in the adapters' order (the marker record once; the index entries, logged as sealed
  segments with their heads; then the sealed records under keyed ids and keyed random vectors) into a dict store
  (:class:`~textcrafter_rag.testing.memory_port.MemoryPort`) that records every request, and reads back what the
  store holds. Every vector in it is the attacker's: the records' vectors, and the library's own records (the
  marker, the log's heads and segment chunks) for membership. Each victim query runs as the adapters run it
  (the core's candidates, then the records by id from the store or from the replica), and the battery keeps what
  the store received: the vector it was searched with (the heads search) and the data records it was asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed import PortRecord, StoreIndexSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.engine import Query, run
from textcrafter_rag.sealed.layout import DIM_KEY, MARKER_KEY, MODE_KEY, is_library_record
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealed.replica import port_hit_fields
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

from .modes import Mode

__all__ = ["BatteryStore", "HeldWorld", "RecordingPort"]

#: The sealed text of every battery record (the battery attacks vectors; text sizes: ``sealing_padding``).
RECORD_TEXT = "a battery record"

#: The ``k`` a victim search keeps (the plain store's 10 opened records).
SEARCH_K = 10


def _u(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64)).astype(np.float32)


class RecordingPort(MemoryPort):
    """A dict store that keeps each record's vector as float32 and records searches and reads by id. Its ``put``
    replaces a held record, as Chroma's and Qdrant's do, so the index log keeps its beacon there too."""

    def __init__(self) -> None:
        super().__init__(replaces_records=True)
        self.searches: list[np.ndarray] = []
        self.reads: list[list[str]] = []

    def put(self, records: Sequence[PortRecord]) -> None:
        super().put([PortRecord(r.id, r.text, dict(r.fields), np.asarray(r.vector, dtype=np.float32)) for r in records])

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        self.reads.append([str(i) for i in ids])
        return super().get(ids)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        q = np.asarray(vector, dtype=np.float32)
        self.searches.append(q)
        held = [r for r in self.records.values() if r.vector is not None]
        if not held:
            return []
        scores = np.stack([np.asarray(r.vector, dtype=np.float32) for r in held]) @ q
        return [held[i] for i in np.argsort(-scores, kind="stable")[:k]]

    def data_ids(self) -> set[str]:
        """Ids of the records that are data (neither the marker nor a log record)."""
        return {i for i, r in self.records.items() if not is_library_record(r.fields)}


class HeldWorld:
    """One application process writing and searching a store in the store-held index mode, over a recording port."""

    def __init__(self, key: bytes, *, context: str, options: StoreIndexSearch) -> None:
        secret = SecretKey(key)
        self.port = RecordingPort()
        self.core = SealedSearch(secret, tenant=context, options=options)
        self.core.attach(self.port)
        self.sealer = RecordSealer(secret, tenant=context)
        self._marked = False

    def store_ids(self, record_ids: Sequence[str]) -> list[str]:
        """The keyed ids the store holds these records under."""
        return [str(self.sealer.store_id(r)) for r in record_ids]

    def _mark(self, dim: int) -> None:
        if self._marked:
            return
        mode = self.core.mode
        fields = {MARKER_KEY: mode, MODE_KEY: mode, DIM_KEY: str(dim)}
        vector = self.core.keyed_vectors(["marker"], dim)[0]
        self.port.put([PortRecord(self.core.marker_id(), self.core.marker_text(), fields, vector)])
        self._marked = True

    def write(self, clean: np.ndarray, record_ids: Sequence[str]) -> np.ndarray:
        """Store these records as the adapters do; the vectors the store then holds for them (unit rows)."""
        x = self.core.check_vectors(np.asarray(clean, dtype=np.float32))
        self._mark(x.shape[1])
        sealed = [self.sealer.seal(RECORD_TEXT, {}, record_id=r) for r in record_ids]
        sids = [str(s.store_id) for s in sealed]
        vectors = self.core.store_vectors(x, sids)
        fields = self.core.record_fields(x, sids, [s.text for s in sealed])
        self.core.index_add(sids, x)  # the index first: no record is ever stored unindexed
        self.port.put(
            [
                PortRecord(sid, s.text, {**{k: v for k, v in s.metadata.items() if isinstance(v, str)}, **f}, v)
                for sid, s, f, v in zip(sids, sealed, fields, vectors, strict=True)
            ]
        )
        return _u(np.stack([np.asarray(self.port.records[s].vector) for s in sids]))

    def library(self) -> np.ndarray:
        """The vectors of the library's own records the store holds now (the marker, the log's heads and chunks)."""
        got = [np.asarray(r.vector) for r in self.port.records.values() if is_library_record(r.fields)]
        return _u(np.stack(got))

    def query(self, clean: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Run one search for the best :data:`SEARCH_K` as the adapters do (the mode's own steps, run by the
        engine's driver): the vector the store was searched with, the data ids it was asked for.

        The ids are in the order asked (the index's ranking when the store is read, nothing with the replica): the
        best ``k`` and ``EXACT_EXTRA`` more while the index is exact, its ``open_k`` once trained.
        """
        n_search, n_read = len(self.port.searches), len(self.port.reads)
        core = self.core
        run(core.search_mode.find(core, Query(np.asarray(clean, np.float32), SEARCH_K, port_hit_fields, records=list)),
            read=self.port.get)  # fmt: skip
        searched = self.port.searches[n_search:]
        data = self.port.data_ids()
        read = [i for ask in self.port.reads[n_read:] for i in ask if i in data]
        return (searched[-1] if searched else np.zeros(len(clean), np.float32)), read


class BatteryStore:
    """One mode's store for the battery: what it holds, and the releases an attacker can have made.

    Attributes:
        bg, mem: The stored vectors of the background records and of the victim notes.
        all: ``bg`` and ``mem`` (row ``i`` is record ``i`` of ``background + members``).
        library: The vectors of the library's own records (store-held modes; empty otherwise).
        q: The vector the store received for each victim query.
        reads: Per victim query, the records (rows of ``all``) the store was asked for (store-held modes only).
    """

    def __init__(self, mode: Mode, background: np.ndarray, members: np.ndarray, queries: np.ndarray) -> None:
        self.mode = mode
        self.bg_ids = [f"bg-{i}" for i in range(len(background))]
        self.member_ids = [f"member-{i}" for i in range(len(members))]
        self._fresh = 0
        self.world = HeldWorld(mode.key, context=mode.context, options=mode.held) if mode.held is not None else None
        self.reads: list[list[int]] | None = None
        self._base: HeldWorld | None = None
        self._clean = (background, members)
        if self.world is None:
            self.bg = mode.store_docs(background, self.bg_ids)
            self.mem = mode.store_docs(members, self.member_ids)
            self.library = np.zeros((0, background.shape[1]), dtype=np.float32)
            self.q = mode.store_queries(queries)
        else:
            self.bg = self.world.write(background, self.bg_ids)
            self.mem = self.world.write(members, self.member_ids)
            self.library = self.world.library()
            self.world.query(queries[0])  # the process's first search (the replica's open reads every record)
            row = {s: i for i, s in enumerate(self.world.store_ids(self.bg_ids + self.member_ids))}
            got = [self.world.query(q) for q in queries]
            self.q = _u(np.stack([v for v, _ in got]))
            self.reads = [[row[s] for s in read] for _, read in got]
        self.all = np.concatenate([self.bg, self.mem])

    def insert(self, clean: np.ndarray) -> np.ndarray:
        """What the store holds for records the attacker had inserted through the app (fresh ids), any leading shape."""
        flat = np.asarray(clean, dtype=np.float32).reshape(-1, clean.shape[-1])
        ids = [f"inserted-{self._fresh + i}" for i in range(len(flat))]
        self._fresh += len(flat)
        if not len(flat):
            return flat.reshape(clean.shape)
        out = self.world.write(flat, ids) if self.world is not None else self.mode.store_docs(flat, ids)
        return out.reshape(clean.shape)

    def replicate_docs(self, clean: np.ndarray, record_ids: Sequence[str]) -> np.ndarray:
        """The key holder's recomputation: what the store would hold for ``clean`` under ``record_ids``."""
        flat = np.asarray(clean, dtype=np.float32).reshape(-1, clean.shape[-1])
        ids = self.world.store_ids(record_ids) if self.world is not None else list(record_ids)
        return self.mode.store_docs(flat, ids).reshape(clean.shape)

    def replicate_queries(self, clean: np.ndarray) -> np.ndarray:
        """The key holder's recomputation of what the store receives for these queries."""
        flat = np.asarray(clean, dtype=np.float32).reshape(-1, clean.shape[-1])
        if self.world is not None:
            if len(np.unique(self.q, axis=0)) == 1:  # every query sent the same vector (the heads search)
                return np.broadcast_to(self.q[:1], flat.shape).reshape(clean.shape).copy()
            return _u(np.stack([self.world.query(q)[0] for q in flat])).reshape(clean.shape)
        return self.mode.store_queries(flat).reshape(clean.shape)

    def opened_own(self, own: np.ndarray, query: np.ndarray) -> list[int]:
        """Store-held modes: the inserter's records (rows of ``own``) the store is asked for by one victim query.

        In a copy of the store as it was before any insertion (background and victims): the inserter's records are
        stored through the app, the victim's query runs, the records are deleted again (the adapters' order: the
        store, then the index). Returned in the order the store was asked for them.
        """
        assert self.world is not None and self.mode.held is not None
        if self._base is None:
            self._base = HeldWorld(self.mode.key, context=self.mode.context, options=self.mode.held)
            self._base.write(self._clean[0], self.bg_ids)
            self._base.write(self._clean[1], self.member_ids)
            self._base.query(query)  # the process's first search, as in the attacked store
        ids = [f"own-{self._fresh + i}" for i in range(len(own))]
        self._fresh += len(own)
        self._base.write(own, ids)
        sids = self._base.store_ids(ids)
        _, read = self._base.query(query)
        self._base.port.delete(sids)
        self._base.core.index_remove(sids)
        row = {s: i for i, s in enumerate(sids)}
        return [row[s] for s in read if s in row]
