"""A local replica of the sealed records, kept in step by the store's index log: queries read no record.

With the store-held index alone, each query fetches its best ``open_k`` records by id, and the store sees
which: an attacker that had its own texts stored learns what a query is about from whether they are read,
and any observer can link two queries that read the same records. With ``StoreIndexSearch(replica=True)``
the process keeps every sealed record locally, as the store returned it (an opaque framework object: a
LangChain ``Document``, a LlamaIndex node, a :class:`~.port.PortRecord`), and a query reads its records from
here. The store then sees per query only the heads search and the log probes, the same for every query.

How it stays in step (the staleness bound is the store-held index's own):

* **Driven by the log.** Every segment the index applies (read by a refresh, or written by this process)
  names the ids it adds, with their clean directions, and the ids it deletes. Added ids become *pending*;
  the next :meth:`Replica.sync` fetches every pending id by id, in batches: reads that depend on what was
  written, never on a query. A tombstone drops the record and the pending id.
* **Checked against the log.** A fetched record settles its pending id only if the clean vector sealed in it
  is the one the segment logged (cosine at least :data:`MATCH`): a writer logs before it stores, so a sync
  that falls between the two reads the old version of a re-added record (or none) and keeps the id pending,
  to be fetched again at the next sync. Until then the record read is kept (what a search without the
  replica would have read).
* **Reads never delete.** An id the store does not return (a writer that logged and has not stored yet, or
  crashed between the two) stays pending, retried at every sync and counted (:attr:`Replica.pending`); only
  a tombstone removes a record. The store stays the source of truth: a new process rebuilds the replica from
  it, reading every record once at its first search.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..numerics import row_cosines
from ..sealing import NotPicklable, SealError
from ..validation import check_int
from .candidates import VECTOR_KEY
from .layout import MODE_KEY
from .log import Segment
from .port import PortRecord
from .record_ids import canonical_record_id
from .records import ID_FIELD

__all__ = ["MATCH", "Fetch", "HitFieldsOf", "OpenVector", "Replica", "port_hit_fields"]

#: Cosine above which a fetched record's sealed vector is the one its segment logged (int8 against float16
#: roundings of one direction agree to about 0.99996; two different texts rarely come within 0.999).
MATCH = 0.999
#: What a pending id reset from a snapshot expects: any version of its record.
_ANY_VERSION = np.zeros(0, dtype=np.float16)
#: Records fetched by id per read of a sync.
DEFAULT_BATCH = 1_000

#: Reads records by their store ids (any order, missing ids absent): the adapter's own read by id.
Fetch = Callable[[list[str]], Sequence[Any]]
#: What the core opens of each record: ``(store id, stored _tc_id, sealed vector, mode, sealed text)``.
HitFieldsOf = Callable[[Sequence[Any]], list[tuple[Any, Any, Any, Any, Any]]]


class OpenVector(Protocol):
    """Opens a record's sealed clean vector (:meth:`~textcrafter_rag.sealed.candidates.TwoStage.open_vector`)."""

    def __call__(self, token: Any, *, record_id: Any, record_text: str | None = None) -> np.ndarray: ...


def port_hit_fields(records: Sequence[PortRecord]) -> list[tuple[Any, Any, Any, Any, Any]]:
    """What the core opens of :class:`~.port.PortRecord` values (the port's own reads, and ``rebuild_index``)."""
    return [(r.id, r.fields.get(ID_FIELD), r.fields.get(VECTOR_KEY), r.fields.get(MODE_KEY), r.text) for r in records]


class Replica(NotPicklable):
    """One process's replica of a store's sealed records, fed by the index log's segments.

    Args:
        fetch: Reads records by store id from the store (the adapter's ``get_by_ids`` / ``get_nodes``).
        fields: What the core opens of each record the fetch returns.
        open_vector: Opens a record's sealed clean vector under this key and tenant.
        batch_size: Ids per read.
    """

    def __init__(
        self, *, fetch: Fetch, fields: HitFieldsOf, open_vector: OpenVector, batch_size: int = DEFAULT_BATCH
    ) -> None:
        self._fetch, self._fields, self._open_vector = fetch, fields, open_vector
        self.batch_size = check_int(batch_size, name="batch_size", low=1, high=1_000_000)
        self._records: dict[str, Any] = {}
        #: Pending ids: the clean direction their latest segment logged (a view into that segment's array).
        self._expected: dict[str, np.ndarray] = {}
        self._lock = threading.RLock()
        #: Ids asked of the store by syncs, in all (every record once at open, then each write's ids).
        self.asked = 0
        #: Syncs that read anything.
        self.syncs = 0

    def use(self, fetch: Fetch, fields: HitFieldsOf) -> None:
        """Read through the adapter's own read by id from now on (records then are its framework objects)."""
        with self._lock:
            self._fetch, self._fields = fetch, fields

    def apply(self, segment: Segment) -> None:
        """Take one applied segment: its deletes drop records, its adds become pending (fetched at the next sync)."""
        with self._lock:
            for rid in segment.deletes:
                self._records.pop(rid, None)
                self._expected.pop(rid, None)
            for rid, vector in zip(segment.adds, segment.vectors, strict=True):
                self._expected[rid] = vector

    def reset(self, ids: Sequence[str]) -> None:
        """The index was replaced by a snapshot holding exactly ``ids``: records of other ids are dropped, and
        every id is fetched again at the next sync (a snapshot keeps no clean vector to check a version against,
        so the record the store holds then settles it)."""
        with self._lock:
            keep = set(ids)
            self._records = {rid: r for rid, r in self._records.items() if rid in keep}
            self._expected = dict.fromkeys(keep, _ANY_VERSION)

    def sync(self) -> int:
        """Fetch every pending id from the store, in batches; how many settled. Nothing fetched is ever deleted."""
        with self._lock:
            if not self._expected:
                return 0
            todo = list(self._expected)
            settled = 0
            for start in range(0, len(todo), self.batch_size):
                settled += self._take(todo[start : start + self.batch_size])
            self.syncs += 1
            return settled

    def _take(self, ids: list[str]) -> int:
        self.asked += len(ids)
        got = list(self._fetch(ids))
        settled = 0
        for record, (store_id, stored_id, token, _mode, text) in zip(got, self._fields(got), strict=True):
            key = canonical_record_id(store_id if store_id is not None else stored_id)
            expected = self._expected.get(key)
            if expected is None:
                continue  # not asked (a store that returns more), or a duplicate already settled
            self._records[key] = record
            try:
                vector = self._open_vector(token, record_id=key, record_text=text if isinstance(text, str) else None)
            except SealError:
                vector = None  # edited or another tenant's: kept as the store holds it, skipped at search
            if vector is None or expected is _ANY_VERSION or _matches(vector, expected):
                del self._expected[key]
                settled += 1
        return settled

    def records(self, ids: Sequence[str]) -> list[Any]:
        """The records held for these ids, in their order (an id not held is absent: counted as dead by the caller)."""
        with self._lock:
            return [self._records[i] for i in map(str, ids) if i in self._records]

    @property
    def pending(self) -> int:
        """Ids logged and not yet settled: not stored yet, stored in an older version, or a crashed writer's."""
        return len(self._expected)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return f"Replica(records={len(self._records)}, pending={len(self._expected)})"


def _matches(opened: np.ndarray, logged: np.ndarray) -> bool:
    """Whether a record's opened vector is the direction its segment logged."""
    x, y = np.asarray(opened).reshape(1, -1), np.asarray(logged).reshape(1, -1)
    return x.shape == y.shape and float(row_cosines(x, y)[0]) >= MATCH
