"""The sealed index's write log, kept in the user's own store: nothing acknowledged is lost by any process.

Stores give upsert, read by ids, delete and search by vector; none gives compare-and-swap or a reliable
listing. So no two processes ever write the same log record:

* **Writer logs.** Every :class:`IndexLog` that writes takes a fresh random 128-bit writer id and appends
  *segments* ``(writer, seq)`` (the index entries a batch adds, with their clean directions, and the ids it
  deletes), each sealed as one AES-256-GCM message under the key's ``"store-index"`` subkey for the tenant,
  base64'd and cut into chunks of at most ``segment_chars`` characters (Milvus VARCHAR holds 65,535), each
  chunk a store record under a keyed id.
* **Heads, found by search.** Each writer keeps one sealed head record ``head(writer, seq)`` naming its
  last sequence number; a new head is written before the previous one is deleted (no head is ever
  overwritten: FAISS and Milvus refuse it), so a crash leaves two heads, never none. Heads are
  stored under keyed vectors close to one keyed "heads" direction, data records and segments under
  unrelated keyed random vectors, so a search for that direction returns every head first, on any store,
  without a listing API. Each head names the other writers its process knew, so a head that an approximate
  engine's search misses is still found through any head that names it.
* **Write order.** segment, then head, then (by the caller) the data records, then the log read again (a
  tombstone that raced the add: its entry logged again, :meth:`StoreIndex.confirm`), then acknowledge. A crash
  after the segment leaves index entries whose records were never stored: a search reads them, finds no
  record, skips and counts them. No record is ever stored without an index entry.
* **Beacon.** On a store whose ``put`` replaces (Chroma, Qdrant), each write then overwrites one sealed record,
  the beacon, with a value no write stored before; a search reads it by id with its records and searches the
  heads only if it changed since the read made before its last search of them (:meth:`IndexLog.probe_beacon`).
* **Readers** (:meth:`IndexLog.refresh`, before each search by default) read the heads, then fetch by id
  every segment past the ones this process applied, *and one past each head* (a writer killed between its
  segment and its head), a few segments a writer at a time, and apply each writer's in its own sequence order,
  different writers' merged by (time, writer, seq). A segment's time is a logical clock: past the wall clock
  and past every segment its writer had read, so a write made after its process read another's is merged
  after it whatever the machines' clocks say (each write reads the log first, as each search does), and a
  writer's clock going back never reorders its own writes; two writers changing one id at the same moment
  (between one's read and its write) are ordered by their clocks. A head lower than one seen before,
  or a segment missing below a head, raises :class:`IndexRollbackError`; a segment that does not open raises
  :class:`IndexTamperedError`. An error or an empty answer never removes an index entry: segments are only
  ever added to what a process holds.

What the store learns: the number, sizes and times of segments (write sizes and times), how many writers
there are, and that a search reads the heads (or the beacon). Not the ids, vectors or texts.
"""

from __future__ import annotations

import heapq
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag

from ..errors import InvalidInputError
from ..sealing import NotPicklable, SecretKey
from .layout import CHUNKS_FIELD, LOG_FIELD
from .log_records import (
    DEFAULT_SEGMENT_CHARS,
    Beacon,
    IndexLogError,
    IndexRollbackError,
    IndexTamperedError,
    LogRecords,
    SegmentGapError,
    snapshot_order,
)
from .port import PortRecord, RecordPort, replaces_records
from .segment import HeadsAhead, Probe, Segment

__all__ = [
    "CHUNKS_FIELD",
    "DEFAULT_SEGMENT_CHARS",
    "LOG_FIELD",
    "IndexLog",
    "IndexLogError",
    "IndexRollbackError",
    "IndexTamperedError",
    "Probe",
    "Segment",
    "SegmentGapError",
    "snapshot_order",
]

#: Records the first head search asks for (beyond the heads this process knows): one non-head ends the search.
_FIRST_HEAD_SEARCH = 4
#: Other writers a head names (the most recent ones this process knows): a head an approximate engine's
#: search missed is still found through any head that names its writer.
_NAMED_WRITERS = 256
#: Segments of one writer read (and held decoded) at a time while refreshing.
_READ_BATCH = 16


class IndexLog(NotPicklable):
    """One process's view of a store's sealed index log: it appends its own segments and reads everyone's.

    Args:
        key: The store's key.
        tenant: The tenant.
        port: The store (:class:`~textcrafter_rag.sealed.port.RecordPort`).
        dim: The dimension of the vectors the store holds (log records are stored under vectors of it).
        segment_chars: Characters of sealed text per log record.
    """

    __slots__ = (
        "_applied",
        "_clock",
        "_head_seen",
        "_lock",
        "_port",
        "_seq",
        "_writer",
        "beacon",
        "dim",
        "epoch",
        "ignored",
        "others_seen",
        "records",
        "searched_heads",
        "snapshot",
        "snapshots",
    )

    def __init__(
        self,
        key: SecretKey,
        *,
        tenant: str = "",
        port: RecordPort,
        dim: int,
        segment_chars: int = DEFAULT_SEGMENT_CHARS,
    ) -> None:
        #: How log messages become store records (ids, keyed vectors, sealing, chunks).
        self.records = LogRecords(key, tenant=tenant, port=port, dim=dim, segment_chars=segment_chars)
        self._port = port
        self.dim = self.records.dim
        self._writer: str | None = None
        self._seq = 0
        #: Highest segment applied per writer (this process's own included).
        self._applied: dict[str, int] = {}
        #: The highest segment time this process wrote or applied: its next segment's time is past it (a
        #: logical clock), so a write made after this process read another's is merged after it, whatever the
        #: two machines' clocks say.
        self._clock = 0
        #: Highest head seen per writer (a lower one later is a rollback).
        self._head_seen: dict[str, int] = {}
        self._lock = threading.RLock()
        #: Whether the last head search returned records that are neither log records nor ``ignored``.
        self.others_seen = False
        #: Store ids of records that are not data (the store's marker record).
        self.ignored: set[str] = set()
        #: The newest compaction snapshot this process knows (every head it writes names it).
        self.snapshot: dict[str, Any] | None = None
        #: The snapshots the last read of the heads named.
        self.snapshots: list[dict[str, Any]] = []
        #: The heads the last search of them returned (writer: sequence number), before known ones were added.
        self.searched_heads: dict[str, int] = {}
        #: The epoch of the snapshot this process's index started from (a clear starts a new one).
        self.epoch = 0
        #: The record every write overwrites, on a store whose ``put`` replaces (:meth:`probe_beacon`).
        self.beacon = Beacon(self.records) if replaces_records(port) else None

    # -- writing -----------------------------------------------------------------------------------

    @property
    def writer(self) -> str | None:
        """This process's writer id (``None`` before its first write)."""
        return self._writer

    def append(
        self, *, adds: Sequence[str] = (), vectors: np.ndarray | None = None, deletes: Sequence[str] = ()
    ) -> Segment:
        """Write one segment, then this writer's head; returns the segment (apply it to the local index).

        Raises whatever the store raises; nothing is acknowledged then, and a later reader merges whatever
        part reached the store (a segment without its head is found one past the head).
        """
        vecs = np.zeros((0, self.dim), dtype=np.float16) if vectors is None else np.asarray(vectors, dtype=np.float16)
        if vecs.shape != (len(adds), self.dim):
            raise InvalidInputError(f"expected {len(adds)} vectors of dimension {self.dim}, got shape {vecs.shape}")
        with self._lock:
            self.ensure_writer()
            seq = self._seq + 1
            self._clock = max(time.time_ns(), self._clock + 1)
            seg = Segment(self._writer, seq, self._clock, [str(i) for i in adds], vecs, [str(i) for i in deletes])
            self.records.put_segment(seg)
            self._seq = seq
            named = [w for w in self._head_seen if w != self._writer][-_NAMED_WRITERS:]
            head = {"writer": self._writer, "seq": seq, "ts": seg.ts, "seen": named, "snap": self.snapshot}
            self.records.put_head(self._writer, seq, head)
            if self.beacon is not None:  # after the head: a reader that reads this value finds the head
                self.beacon.put(self._writer, seq)
            if seq > 1:
                self.records.delete_quietly([self.records.head_id(self._writer, seq - 1)])
            self._head_seen[self._writer] = seq
            if self._applied.get(self._writer, 0) == seq - 1:
                self._applied[self._writer] = seq
            return seg

    def new_writer(self) -> None:
        """Write on under a new writer id (the store was cleared: this writer's old segments are gone)."""
        with self._lock:
            self._writer, self._seq = None, 0

    def ensure_writer(self) -> str:
        """This process's writer id, taken now if it has none."""
        with self._lock:
            if self._writer is None:
                self._writer = secrets.token_hex(16)
            return self._writer

    def forget_chunks(self, covers: dict[str, int]) -> None:
        """Drop the chunk counts of the segments ``covers`` names (a compaction deleted them)."""
        with self._lock:
            self.records.forget_chunks(covers)

    # -- reading -----------------------------------------------------------------------------------

    def heads(self) -> dict[str, int]:
        """Every writer's last sequence number, as the store's heads say (searched, then known ones by id).

        Heads that do not open (another tenant's in the same collection) are passed over.

        Raises:
            IndexRollbackError: A head is lower than one this process saw before.
        """
        found: dict[str, int] = {}
        named: set[str] = set()
        self.snapshots = []
        k = len(self._head_seen) + _FIRST_HEAD_SEARCH
        while True:
            hits = self._port.search(self.records.heads_direction(), k)
            self.others_seen = any(r.fields.get(LOG_FIELD) is None and r.id not in self.ignored for r in hits)
            for rec in hits:
                self._read_head(rec, found, named)
            if len(hits) < k or any(rec.fields.get(LOG_FIELD) != "head" for rec in hits):
                break  # every head ranks above every other record: one non-head means all heads were returned
            k *= 4
        self.searched_heads = dict(found)
        # A writer this process knows but whose head the search missed (approximate engines) is still read:
        # refresh probes every known writer's next segment by id.
        for writer, seq in found.items():
            if seq < self._head_seen.get(writer, 0):
                raise IndexRollbackError(
                    f"an index head is at {seq}, below the {self._head_seen[writer]} this process saw: the store's "
                    "index was rolled back or replaced; nothing was applied"
                )
        for writer, seen in self._head_seen.items():
            found[writer] = max(found.get(writer, 0), seen)
        for writer in named - found.keys():  # its head was missed: refresh probes its segments from the first
            found[writer] = 0
        for snap in self.snapshots:  # every head this process writes names the newest snapshot it knows
            if self.snapshot is None or snapshot_order(snap) > snapshot_order(self.snapshot):
                self.snapshot = snap
        return found

    def _read_head(self, rec: PortRecord, found: dict[str, int], named: set[str]) -> None:
        if rec.fields.get(LOG_FIELD) != "head":
            return
        try:
            head = json.loads(self.records.open(rec.text, kind="head", ident=rec.id))
        except (InvalidTag, ValueError):
            return  # another tenant's head under the same collection (or a forged one): never ours
        writer, seq = str(head["writer"]), int(head["seq"])
        if self.records.head_id(writer, seq) != rec.id:
            return
        found[writer] = max(found.get(writer, 0), seq)
        named.update(str(w) for w in head.get("seen", ()))
        snap = head.get("snap")
        if isinstance(snap, dict) and {"writer", "n", "chunks", "covered", "epoch"} <= snap.keys():
            self.snapshots.append(snap)

    def refresh(
        self, apply: Callable[[Segment], None], restore: Callable[[SegmentGapError | None], bool] | None = None
    ) -> int:
        """Hand ``apply`` the segments written since this process last read; how many it was handed.

        Each writer's segments come in sequence order; different writers' are merged by (time, writer, seq).
        One read fetches every writer's next segments (one past its head at least); a writer with more is
        then read :data:`_READ_BATCH` segments at a time, so opening a large log holds a few segments a writer
        in memory, never the whole log.

        ``restore`` (a compacted log's reader) loads a snapshot and calls :meth:`start_from` with what it covers:
        called with ``None`` by a process that has applied nothing yet, when the heads name a snapshot, and with
        the gap when a segment below a head is missing (a compaction deleted it); it says whether it restored.

        Raises:
            IndexRollbackError: A head went back (nothing is handed over), or a segment below a head is missing
                and no snapshot covers it (the segments before the gap were handed over; none after it).
            IndexTamperedError: A segment under this key's id does not open.
        """
        with self._lock:
            return self._read_all(self.heads(), apply, restore)

    def _read_all(
        self,
        heads: dict[str, int],
        apply: Callable[[Segment], None],
        restore: Callable[[SegmentGapError | None], bool] | None,
        got: dict[str, PortRecord] | None = None,
    ) -> int:
        """:meth:`refresh` past reading the heads (``got``: the first read's records, when already read)."""
        newer = any(int(s.get("epoch", 0)) > self.epoch for s in self.snapshots)
        if restore is not None and self.snapshots and (not self._applied or newer):
            restore(None)  # a new process, or the store was cleared since this one last read
            got = None  # read for what was applied before the snapshot: read again
        try:
            return self._read(heads, apply, got)
        except SegmentGapError as gap:
            if restore is None or not restore(gap):
                raise
            return self._read(self.heads(), apply)

    def probe_later(self, apply: Callable[[Segment], None], restore: Callable[[SegmentGapError | None], bool]) -> Probe:
        """:meth:`refresh`, except that where the heads show nothing new, its read by id (each writer's segment one
        past its head) is left to the caller, who makes it with the records it reads anyway: one store round trip
        a search instead of two. Finish with :meth:`probed`. Where the heads show news (or a snapshot to load) the
        log is read now, as by :meth:`refresh`, and the probe holds no ids. The same read, only later: what it
        finds is applied before the caller ranks (the caller then picks again), so the staleness is unchanged."""
        with self._lock:
            heads = self.heads()
            newer = any(int(s.get("epoch", 0)) > self.epoch for s in self.snapshots)
            quiet = all(seq <= self._applied.get(w, 0) for w, seq in heads.items())
            if not quiet or (self.snapshots and (not self._applied or newer)):
                self._read_all(heads, apply, restore)
                return Probe([], {}, {}, self.epoch)
            return Probe(self._next_ids(heads), heads, dict(self._applied), self.epoch)

    def probe_ahead(self) -> Probe | None:
        """:meth:`probe_later` with the heads searched in a thread of their own, for a store that takes two calls
        at once: the caller's read of its records, with each known writer's next segment (what the heads name
        unless someone wrote since), goes out while the heads are searched, so a quiet log costs no round trip
        of its own. :meth:`probed` waits for the heads and reads whatever they show beyond the guess: the same
        read as :meth:`probe_later`'s, so the staleness is unchanged. ``None`` before this process read the log
        (its first read may load a snapshot: :meth:`probe_later`)."""
        with self._lock:
            if not self._applied:
                return None
            known = dict.fromkeys([*self._applied, *self._head_seen, *self.searched_heads], 0)
            ids, applied, epoch = self._next_ids(known), dict(self._applied), self.epoch

        def search() -> dict[str, int]:
            with self._lock:
                return self.heads()

        return Probe(ids, {}, applied, epoch, HeadsAhead(search))

    def probe_beacon(self) -> Probe | None:
        """:meth:`probe_ahead` with no search of the heads (:class:`Beacon`): the beacon is read with each known
        writer's next segment, the heads searched after it only if it changed (a write acknowledged before the
        search began did change it: the staleness is unchanged). ``None``: no beacon, or nothing applied yet."""
        with self._lock:
            if self.beacon is None or not self._applied:
                return None
            ids = self._next_ids(dict.fromkeys([*self._applied, *self._head_seen], 0))
            return Probe([*ids, self.beacon.id], {}, dict(self._applied), self.epoch, beacon=True)

    def _next_ids(self, heads: dict[str, int]) -> list[str]:
        """The first-chunk ids of each writer's segment one past the last applied (a quiet log's whole read)."""
        return [cid for w in heads for cid in self._batch_ids(w, self._applied.get(w, 0) + 1, heads[w])]

    def probed(
        self,
        probe: Probe,
        records: Sequence[PortRecord],
        apply: Callable[[Segment], None],
        restore: Callable[[SegmentGapError | None], bool],
    ) -> int:
        """Finish :meth:`probe_later` or :meth:`probe_ahead` with the records read of ``probe.ids`` (others are
        ignored); how many segments were applied. If this process read or wrote the log in between, the log is
        read again instead. Where the heads, searched ahead, name more than the guess read (a writer wrote since,
        or one the guess did not know), the rest of the first read is made now."""
        heads = probe.read_heads()  # before the lock: the search ahead takes it
        with self._lock:
            if not probe.ids:
                return 0
            if self._applied != probe.applied or self.epoch != probe.epoch:
                return self.refresh(apply, restore)
            asked = set(probe.ids)
            got = {r.id: r for r in records if r.id in asked}
            if probe.beacon and self.beacon is not None:
                known = {w: max(self._applied.get(w, 0), s) for w, s in {**self._applied, **self._head_seen}.items()}
                heads = self.beacon.heads(list(got.values()), known, self.heads)
            if missing := [cid for cid in self._next_ids(heads) if cid not in asked]:
                got.update((r.id, r) for r in self._port.get(missing))
            return self._read_all(heads, apply, restore, got)

    def start_from(self, covers: dict[str, int], *, epoch: int) -> None:
        """Forget what was applied: the caller's index now holds a snapshot of every writer's first ``covers``.

        The snapshot's own head is one past what it covers (an empty segment, stamped past every segment its
        writer had applied), so this process's clock passes every write the snapshot holds when it reads it.
        """
        with self._lock:
            self.epoch = int(epoch)
            self._applied = {str(w): int(s) for w, s in covers.items()}
            # not added to the heads seen: a writer the snapshot covers is read again once a head of it is found
            # (its next write), so a new process does not probe every writer that ever wrote

    @property
    def applied(self) -> dict[str, int]:
        """The highest segment applied per writer (what a snapshot of this process's index covers)."""
        with self._lock:
            return dict(self._applied)

    def _read(
        self, heads: dict[str, int], apply: Callable[[Segment], None], got: dict[str, PortRecord] | None = None
    ) -> int:
        with self._lock:
            if got is None:
                wanted = [cid for w in heads for cid in self._batch_ids(w, self._applied.get(w, 0) + 1, heads[w])]
                got = {r.id: r for r in self._port.get(wanted)} if wanted else {}
            streams = [self._segments(w, heads[w], got) for w in heads]
            count = 0
            for _, _, _, seg in heapq.merge(*streams):
                self._clock = max(self._clock, seg.ts)
                apply(seg)
                self._applied[seg.writer] = max(self._applied.get(seg.writer, 0), seg.seq)
                count += 1
            return count

    def _batch_ids(self, writer: str, seq: int, head: int) -> list[str]:
        """The first-chunk ids of the next read of ``writer`` from ``seq``: up to one past its head, a batch at most."""
        return [self.records.chunk_id(writer, s, 0) for s in range(seq, seq + min(_READ_BATCH, max(1, head - seq + 2)))]

    def _segments(self, writer: str, head: int, got: dict[str, PortRecord]) -> Iterator[tuple[int, str, int, Segment]]:
        """One writer's segments past those applied, in sequence order: up to its head, then while any follow.

        ``got`` holds the first read's records (this writer's are taken out of it as they are read).
        """
        seq = self._applied.get(writer, 0) + 1
        asked = self._batch_ids(writer, seq, head)
        while True:
            batch = []
            while self.records.chunk_id(writer, seq, 0) in got:
                batch.append(self.records.read_segment(writer, seq, got.pop(self.records.chunk_id(writer, seq, 0))))
                seq += 1
            for cid in asked:
                got.pop(cid, None)
            if seq <= head and len(batch) < len(asked):
                raise SegmentGapError(writer, seq, head - seq + 1)
            self._head_seen[writer] = max(self._head_seen.get(writer, 0), head)
            for seg in batch:
                yield seg.ts, seg.writer, seg.seq, seg
            if len(batch) < len(asked):  # the first missing sequence number past the head: the end
                return
            asked = self._batch_ids(writer, seq, head)
            got = {r.id: r for r in self._port.get(asked)}

    def __repr__(self) -> str:
        return f"IndexLog(writer={self._writer!r}, key=<redacted>)"
