"""The store-held index mode: the store ranks nothing, and the index lives, sealed, in the store itself.

The store holds each record under a keyed random vector (no relation to its text) and the sealed write log
of the index (:mod:`.log`). Any process that holds the key opens the store and searches with nothing else:
it reads the log into a FAISS index in memory (:mod:`.vector_index`), scans it for the ``open_k`` best
records, fetches those by id and ranks them exactly by their sealed clean vectors.

Staleness: with ``refresh_every=0`` (the default) every search first reads the heads and any new segments,
so an add acknowledged before a search starts is found by that search, in every process. A positive
``refresh_every`` reads the log at most that often (seconds): an acknowledged add is then found at the latest
``refresh_every`` seconds later. A search whose heads show nothing new makes the log's last read (each writer's
next segment, :meth:`StoreIndex.candidates_probing`) in the same request as its records; what it finds is
applied, and the candidates picked again, before ranking.

Compaction (:mod:`.compaction`): once a process has written ``compact_every`` index entries since its last
snapshot (and at least a quarter of the index), it stores the index as a sealed snapshot and deletes the
segments it covers, so a new process reads the snapshot and the segments past it, not the whole log. The write
that makes it due starts it in a background thread and returns, where the store takes calls from two threads
(a server's client, :func:`~.port.serves_concurrent_calls`): at a million records a compaction takes over a
second and stores about 100 MB. An in-process engine (Qdrant local, FAISS, the in-memory stores) compacts in that
write instead: a search it answered while another thread compacted failed (Qdrant local, a million records).
Only copying the index holds the lock that writes and searches take (:meth:`StoreIndex.compact`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..deprecation import renamed_keyword
from ..errors import InvalidInputError, InvalidTypeError
from ..heap import release_free_heap
from ..logs import logger
from ..sealing import NotPicklable, SecretKey
from ..validation import check_int
from .background import lower_this_thread
from .compaction import Snapshots
from .log import DEFAULT_SEGMENT_CHARS, IndexLog, Probe, Segment, SegmentGapError
from .port import PortRecord, RecordPort, concurrent_calls
from .sizing import OPEN_K_MOST, sized
from .vector_index import VectorIndex

__all__ = ["EXACT_EXTRA", "StoreIndex", "StoreIndexSearch"]

#: Records read past the ``k`` a search keeps while the index is exact (below ``train_at``: the opened vectors'
#: ranking then only confirms the index's): room for entries whose records are gone and for ties in the last
#: places between the index's float32 scores and the opened vectors' cosines, without a second read.
EXACT_EXTRA = 8
#: Index entries per segment written by a rebuild or a large add (a segment is one sealed message).
_SEGMENT_ENTRIES = 2_000
#: Index entries applied (read or written) after which the C heap's free pages are handed back (:mod:`..heap`):
#: decoding and applying segments frees buffers among the arrays the index keeps.
_RELEASE_AFTER = 20_000


@dataclass(frozen=True)
class StoreIndexSearch:
    """The options of the store-held index, validated once here.

    Args:
        open_k: Records fetched by id, opened and ranked exactly per query once the codebook is trained (at least
            every search's ``k``); ``None`` (the default): by the records the index holds (:mod:`.sizing`: from 25
            in a small store to 200 past three million records); a search's ``k`` may then be up to 200, and a search
            that filters what it read (LlamaIndex's ``doc_ids``) reads 200.
        code_bytes: Bytes of PQ code a record in memory once the codebook is trained (residual codes after a
            learned rotation: see :mod:`.vector_index`).
        train_at: Records held exactly in memory before a codebook is trained (in the background).
        scan_codes: PQ codes a query scans once the codebook is trained (whole inverted lists, nearest first):
            more keeps more of a query's true neighbours among the first ``open_k`` in a store of millions of
            records, at a scan cost that grows with it (``benchmarks.sealed_search.store_index_scale``); ``None``
            (the default): by the records the index holds (:mod:`.sizing`).
        refresh_every: Seconds between reads of the store's log; ``0`` reads it before every search (an
            acknowledged add is then found by the next search of every process).
        segment_chars: Characters of sealed text per log record (Milvus VARCHAR holds 65,535).
        background_training: Train the codebook in a background thread (``False``: in the write that
            crosses ``train_at``).
        compact_every: Index entries this process writes before it compacts the log into a snapshot (and at
            least a quarter of the index, so compaction rewrites at most a few times the index in all); ``0``
            never compacts by itself (:meth:`StoreIndex.compact` still does).
        background_compaction: Run a compaction that ``compact_every`` makes due in a background thread, which
            then calls the store while writes go on, where the store takes calls from two threads (its port says
            so: a server's client); ``False``, or an in-process engine: in the write that makes it due.
        replica: Keep a local replica of the sealed records, synced from the store by the log
            (:mod:`.replica`), so that a query reads no record from the store: the store no longer sees which
            records a query reads. Opening then reads every record once, and memory holds every record.
    """

    open_k: int | None = None
    code_bytes: int = 32
    train_at: int = 20_000
    scan_codes: int | None = None
    refresh_every: float = 0.0
    segment_chars: int = DEFAULT_SEGMENT_CHARS
    background_training: bool = True
    compact_every: int = 50_000
    background_compaction: bool = True
    replica: bool = False

    def __post_init__(self) -> None:
        if self.open_k is not None:
            object.__setattr__(self, "open_k", check_int(self.open_k, name="open_k", low=1, high=100_000))
        object.__setattr__(self, "code_bytes", check_int(self.code_bytes, name="code_bytes", low=1, high=4096))
        object.__setattr__(self, "train_at", check_int(self.train_at, name="train_at", low=256, high=1 << 40))
        if self.scan_codes is not None:
            object.__setattr__(self, "scan_codes", check_int(self.scan_codes, name="scan_codes", low=1, high=1 << 40))
        object.__setattr__(
            self, "compact_every", check_int(self.compact_every, name="compact_every", low=0, high=1 << 40)
        )
        object.__setattr__(
            self, "segment_chars", check_int(self.segment_chars, name="segment_chars", low=1024, high=1 << 30)
        )
        if isinstance(self.refresh_every, bool) or not isinstance(self.refresh_every, (int, float)):
            raise InvalidTypeError(
                f"refresh_every must be a number of seconds, got {type(self.refresh_every).__name__}"
            )
        if not 0 <= self.refresh_every < float("inf"):
            raise InvalidInputError(f"refresh_every must be finite and non-negative, got {self.refresh_every}")
        if not isinstance(self.background_training, bool):
            raise InvalidTypeError("background_training must be a bool")
        if not isinstance(self.background_compaction, bool):
            raise InvalidTypeError("background_compaction must be a bool")
        if not isinstance(self.replica, bool):
            raise InvalidTypeError("replica must be a bool")

    @property
    def most_opened(self) -> int:
        """The most records a query opens: ``open_k``, or the most :mod:`.sizing` opens where it is unset."""
        return OPEN_K_MOST if self.open_k is None else self.open_k

    def opened(self, n_records: int) -> int:
        """The records a query opens once the codebook is trained, in an index of ``n_records``."""
        return sized(n_records)[0] if self.open_k is None else self.open_k


class StoreIndex(NotPicklable):
    """One process's store-held index: the sealed log in the store, a FAISS cache of it in memory.

    Args:
        key: The store's key.
        tenant: The tenant (``context=`` is its deprecated name).
        options: :class:`StoreIndexSearch`.
        port: The store.
        dim: The encoder's dimension.
    """

    def __init__(
        self,
        key: SecretKey,
        *,
        tenant: str = "",
        options: StoreIndexSearch,
        port: RecordPort,
        dim: int,
        context: str | None = None,
    ) -> None:
        tenant = renamed_keyword(tenant, context, new="tenant=", old="StoreIndex(context=)", default="")
        self.options = options
        self.log = IndexLog(key, tenant=tenant, port=port, dim=dim, segment_chars=options.segment_chars)
        #: Whether a compaction may call the store from a thread of its own (:func:`~.port.concurrent_calls`).
        self.background = options.background_compaction and concurrent_calls(port)
        #: Whether a search reads the heads in a thread of its own, beside its read of records
        #: (:meth:`IndexLog.probe_ahead`): on a store that takes two calls at once.
        self.ahead = concurrent_calls(port)
        self.index = self._new_index()
        self.snapshots = Snapshots(self.log)
        self._lock = threading.RLock()
        #: Held by the one compaction that runs (taken before :attr:`_lock`, never while holding it and waiting).
        self._compacting = threading.Lock()
        #: The background compaction last started (:meth:`wait_compacted` joins it).
        self._compaction: threading.Thread | None = None
        self._read_at: float | None = None
        #: Index entries this process logged since its last snapshot.
        self._since_snapshot = 0
        #: Index entries applied since the C heap's free pages were last handed back.
        self._churn = 0
        #: Called with every segment applied, read or written here (the replica follows the log through it).
        self.listeners: list[Callable[[Segment], None]] = []
        #: Called with every id held after a snapshot replaced the index (the replica settles them again).
        self.resets: list[Callable[[list[str]], None]] = []

    def _new_index(self) -> VectorIndex:
        o = self.options
        return VectorIndex(
            self.log.dim,
            code_bytes=o.code_bytes,
            train_at=o.train_at,
            background=o.background_training,
            scan_codes=o.scan_codes,
        )

    def _apply(self, segments: Iterable[Segment]) -> None:
        for seg in segments:
            if seg.deletes:
                self.index.remove(seg.deletes)
            if seg.adds:
                self.index.add(seg.adds, seg.vectors.astype(np.float32))
            for listen in self.listeners:
                listen(seg)
            self._churn += len(seg.adds) + len(seg.deletes)
            if self._churn >= _RELEASE_AFTER:
                self._churn = 0
                release_free_heap()

    def refresh(self) -> int:
        """Read the store's log now and apply what other processes wrote; how many segments were applied."""
        with self._lock:
            count = self.log.refresh(lambda seg: self._apply([seg]), self._restore)
            self._read_at = time.monotonic()
            return count

    def _restore(self, gap: SegmentGapError | None) -> bool:
        """Replace the index by the newest snapshot (one that covers ``gap``); whether one was loaded."""

        def restore(data: bytes) -> None:
            self.index.restore(data)
            if self.resets:  # every id as a string: only for those who follow the index (the replica)
                ids = self.index.ids()
                for reset in self.resets:
                    reset(ids)

        loaded = (
            self.snapshots.load(restore)
            if gap is None
            else self.snapshots.load(restore, writer=gap.writer, seq=gap.seq)
        )
        if loaded:  # a snapshot's sealed text, read in chunks, is freed by now
            release_free_heap()
        return loaded

    def compact(self, *, wait: bool = True) -> bool:
        """Store this process's index as a sealed snapshot now, and delete the segments it covers; whether a
        snapshot was written (not while the codebook trains: the next write retries). It first waits for a
        compaction in flight. ``wait=False`` starts one as ``compact_every`` does (in a background thread where the
        store takes calls from two threads, else in this call): whether it started (not while one runs)."""
        if not wait:
            with self._lock:
                return self._start_compaction()
        with self._compacting:
            return self._compact()

    def _compact(self, *, in_background: bool = False) -> bool:
        """One compaction (the caller holds :attr:`_compacting`, so no other runs); whether a snapshot was written.

        Writes and searches go on meanwhile, except while the index is copied (:meth:`VectorIndex.copy`): the copy
        and what it covers (the segments applied) are taken together under the lock that applies segments, so the
        snapshot holds exactly what it covers. Serializing the copy (:mod:`.index_copy`), sealing and storing it,
        and deleting what it covers run without it, in a background thread at a lower priority (:mod:`.background`);
        a segment written meanwhile is past what the snapshot covers: neither in it nor deleted.
        """
        with self._lock:
            self.refresh()  # the snapshot covers what other processes wrote too: fewer segments left to read
            copy = self.index.copy()
            if copy is None:
                return False
            covers, epoch, taken, snapshots = self.log.applied, self.log.epoch, self._since_snapshot, self.snapshots
        if in_background:  # no lock held from here to the empty segment: the writes come first (:mod:`.background`)
            lower_this_thread()
        data = copy.parts()
        del copy
        pointer = snapshots.store(data, covers, epoch=epoch)
        del data
        with self._lock:  # one empty segment, like a write; its head makes the snapshot durable
            if self.log.epoch != epoch:  # another process cleared the store meanwhile: this index is gone with it
                stale, previous = True, None
            else:
                stale, previous = False, snapshots.point(pointer)
                self._since_snapshot = max(0, self._since_snapshot - taken)  # the entries written since stay due
        if stale:
            snapshots.discard(pointer)
            logger.info("a compaction was dropped: the store was cleared while it ran")
            return False
        snapshots.clean(pointer, covers, previous)
        release_free_heap()  # the index's bytes and their sealed text are freed
        return True

    def wait_compacted(self, timeout: float | None = None) -> bool:
        """Wait for a background compaction in flight (tests, scripts, a process about to exit); whether none
        runs now. A process that exits during one leaves what a crash there leaves: nothing lost
        (:mod:`.compaction`)."""
        thread = self._compaction
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def cleared(self, heads: dict[str, int]) -> None:
        """The store was cleared, this key and tenant's log with it: start a new epoch of the log.

        ``heads`` is every writer's head just *before* the clear (:meth:`IndexLog.heads`). This process writes on
        under a new writer id, and stores an empty snapshot in a new epoch that covers ``heads``: every other
        process drops what it holds at its next read, and a writer of another process that wrote before the
        clear writes on, its new segments read from past its cleared ones. A write that races the clear (between
        reading ``heads`` and the clear) may be taken for a rollback: clear while no other process writes.
        """
        with self._compacting, self._lock:  # a compaction in flight finishes first: it never spans a clear
            epoch = max([self.log.epoch, *(int(s.get("epoch", 0)) for s in self.log.snapshots)]) + 1
            self.log.new_writer()
            self.index = self._new_index()
            for reset in self.resets:
                reset([])
            self.log.start_from(heads, epoch=epoch)
            self.snapshots = Snapshots(self.log, deleted=heads)
            empty = self.index.copy()
            assert empty is not None  # an empty index is never training
            self.snapshots.write(empty.parts(), heads, epoch=epoch)
            self._since_snapshot = 0
            self._read_at = time.monotonic()

    def _compact_if_due(self, entries: int) -> None:
        """Start a compaction once due (the caller holds :attr:`_lock`): in a background thread, so the write
        returns, or inline with ``background_compaction=False``. One runs at a time: while one runs, a due one is
        skipped, and the next write checks again."""
        self._since_snapshot += entries
        every = self.options.compact_every
        if every and self._since_snapshot >= max(every, len(self.index) // 4):
            self._start_compaction()

    def _start_compaction(self) -> bool:
        """Start a compaction unless one runs (the caller holds :attr:`_lock`); whether one started."""
        if not self._compacting.acquire(blocking=False):
            return False
        if not self.background:
            self._compact_quietly()
            return True
        try:
            thread = threading.Thread(
                target=self._compact_quietly, kwargs={"in_background": True}, name="textcrafter-compaction", daemon=True
            )
            thread.start()
        except BaseException:
            self._compacting.release()
            raise
        self._compaction = thread
        return True

    def _compact_quietly(self, *, in_background: bool = False) -> None:
        """One compaction that was started, not waited for; it releases :attr:`_compacting`."""
        try:
            self._compact(in_background=in_background)
        except Exception as exc:  # the write itself is logged: a failed compaction is retried, never fatal
            logger.warning("compacting the sealed index failed (retried at a later write): %s", exc)
        finally:
            self._compacting.release()

    def _log_due(self) -> bool:
        """Whether the log is to be read before this write or search (``refresh_every``)."""
        every = self.options.refresh_every
        return self._read_at is None or every == 0 or time.monotonic() - self._read_at >= every

    def _refresh_if_due(self) -> None:
        if self._log_due():
            self.refresh()

    def add(self, ids: Sequence[str], clean: np.ndarray) -> None:
        """Log these index entries in the store (before the caller stores the records), then index them here.

        The log is read first (as before a search, ``refresh_every``): a first write never starts an index that
        hides the records already there, and the segment is merged after every write this process has read.
        """
        with self._lock:
            self._refresh_if_due()
            for start in range(0, len(ids), _SEGMENT_ENTRIES):
                part = list(ids[start : start + _SEGMENT_ENTRIES])
                seg = self.log.append(adds=part, vectors=clean[start : start + len(part)])
                self._apply([seg])
            self._compact_if_due(len(ids))

    def confirm(self, ids: Sequence[str], clean: np.ndarray) -> int:
        """After the caller stored these records: read the log, and log again those a delete from another process
        removed meanwhile (one that raced this add: its store delete came before this store write, its tombstone
        after this entry); how many. The store holds them, so the index must: an entry logged again is stamped
        after the delete. An entry of a record deleted after this write is logged again too: a dead entry,
        skipped and counted at search, never a stored record no search finds."""
        with self._lock:
            self.refresh()
            gone = [i for i, held in enumerate(self.index.holds(ids)) if not held]
            if gone:
                self.add([ids[i] for i in gone], np.asarray(clean)[gone])
                logger.info("%d index entries a racing delete removed were logged again", len(gone))
            return len(gone)

    def remove(self, ids: Sequence[str]) -> None:
        """Log tombstones for these ids (after the caller deleted the records), then forget them here (the log
        read first, as in :meth:`add`)."""
        with self._lock:
            self._refresh_if_due()
            for start in range(0, len(ids), _SEGMENT_ENTRIES):
                self._apply([self.log.append(deletes=list(ids[start : start + _SEGMENT_ENTRIES]))])
            self._compact_if_due(len(ids))

    def candidates(self, query: np.ndarray, k: int) -> list[str]:
        """The ids of the ``k`` records the index ranks best for the clean query (after reading the log if due)."""
        self._refresh_if_due()
        return self.index.search(query, k)

    def candidates_probing(self, query: np.ndarray, k: int) -> tuple[list[str], Probe | None]:
        """:meth:`candidates`, the log's read by id left to the caller's read of the records
        (:meth:`IndexLog.probe_later`; on a store that takes two calls at once :meth:`IndexLog.probe_ahead`, the
        heads searched meanwhile; on a store whose ``put`` replaces :meth:`IndexLog.probe_beacon`, the heads
        searched only if a write was made since): read ``probe.ids`` with them and hand what came back to
        :meth:`probed` before ranking. ``None``: nothing left to read (the log was read, or was not due)."""
        if not self._log_due():
            return self.index.search(query, k), None
        with self._lock:
            probe = self.log.probe_beacon() or (self.log.probe_ahead() if self.ahead else None)
            if probe is None:
                probe = self.log.probe_later(lambda seg: self._apply([seg]), self._restore)
            if not probe.ids:
                self._read_at = time.monotonic()
        return self.index.search(query, k), probe if probe.ids else None

    def probed(self, probe: Probe, records: Sequence[PortRecord]) -> bool:
        """Finish :meth:`candidates_probing` with the records read (the log's among them are applied); whether the
        index changed since the candidates were picked (then pick them again from :attr:`index`, which reads
        nothing: the log was just read)."""
        probe.read_heads()  # a search of the heads under way: waited for before the lock (it takes the log's)
        with self._lock:
            applied = self.log.probed(probe, records, lambda seg: self._apply([seg]), self._restore)
            self._read_at = time.monotonic()
            return applied > 0

    def rebuild(
        self, batches: Iterable[tuple[Sequence[str], np.ndarray]], *, progress: Callable[[int], None] | None = None
    ) -> int:
        """Index every record these batches name (ids with their opened clean vectors); how many were indexed.

        A rebuild only adds entries (upserts): it never tombstones an entry whose record it did not find, since
        another writer may have logged that entry and not yet stored its record. Entries of deleted records are
        skipped and counted at search.
        """
        self.refresh()
        total = 0
        for ids, clean in batches:
            if len(ids):
                self.add(list(ids), np.asarray(clean, dtype=np.float32))
                total += len(ids)
                if progress is not None:
                    progress(len(ids))
        return total

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        return f"StoreIndex(options={self.options!r}, key=<redacted>)"
