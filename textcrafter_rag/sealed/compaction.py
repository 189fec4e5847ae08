"""Compaction: the index log folded into sealed snapshots, so that opening a store reads one, not the whole log.

A process that has applied the log holds the whole index in memory; a **snapshot** is that index (FAISS's own
serialization of the inverted file, or the exact directions, with the id table: :meth:`.VectorIndex.copy`)
with the segments it covers (the highest applied per writer), sealed as one message under the index subkey and
stored in chunks like a segment. The protocol, in order:

1. **Write the snapshot** under ids no one else writes (``snap|writer|n|chunk``).
2. **Point at it**: the writer appends an empty segment whose head names the snapshot. From here it is
   durable: every later head of every process that read it names the newest snapshot it knows, so one head
   an approximate engine's search misses does not hide it.
3. **Delete what it covers**: this writer's previous snapshot, the heads of other writers it covers (a writer
   that writes again writes a new head, found by the next head search; a new process starts each covered writer
   from the snapshot and reads it again only once a new head of it appears), and every segment it covers that
   this process read. Best effort: a failed delete loses nothing, it only leaves records the next compaction
   deletes.

Writes go on during a compaction (:class:`~.store_index.StoreIndex` runs it in a background thread): the index
bytes and ``covers`` (the segments applied, per writer) are taken together, under the lock that applies
segments, so a snapshot holds exactly the segments it covers. Step 1 and step 3 run without that lock; a
segment written after the bytes were taken is past ``covers``: it is neither in the snapshot nor deleted, and a
process that opens from the snapshot reads it from the log. Step 2 is one empty segment, like a write.

A process that has applied nothing (a new process) loads the newest snapshot the heads name, then reads only
the segments past it. A process that finds a segment missing below a head (a compaction deleted it while it
was behind) loads a snapshot that covers the gap and reads on from there; if none covers it, the gap is a
rollback (:class:`~.log.SegmentGapError`). A snapshot is a state of the log, so the rollback checks hold:
heads never go back, and a snapshot that does not open is refused (:class:`~.log_records.IndexTamperedError`).

What the store learns: that a compaction happened, and the snapshot's size (about the index's size).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..logs import logger
from ..sealing import NotPicklable
from .log import IndexLog, snapshot_order
from .log_records import Buffer, IndexRollbackError, IndexTamperedError, chunk_count

__all__ = ["Snapshots"]


class Snapshots(NotPicklable):
    """Writes and reads one key and tenant's compaction snapshots, through its :class:`~.log.IndexLog`.

    Args:
        log: The process's log (its records, heads and writer id).
    """

    def __init__(self, log: IndexLog, *, deleted: dict[str, int] | None = None) -> None:
        self.log = log
        #: Per writer, the segments up to which this process knows the store holds none (covered and deleted).
        self._deleted: dict[str, int] = dict(deleted or {})
        #: This writer's last snapshot (deleted when it writes the next).
        self._own: dict[str, Any] | None = None
        #: Snapshots this process wrote, and loaded.
        self.written = 0
        self.loaded = 0

    def _chunk_ids(self, writer: str, n: int) -> Callable[[int], str]:
        return lambda c: self.log.records.record_id(f"snap|{writer}|{n}|{c}")

    # -- writing -----------------------------------------------------------------------------------

    def write(self, index: Sequence[Buffer], covers: dict[str, int], *, epoch: int | None = None) -> dict[str, Any]:
        """Store ``index`` (the bytes, in parts, of what the segments ``covers`` names built) as a snapshot, point
        the heads at it, and delete what it covers, in a row; the pointer its head carries.

        ``epoch`` (a new one after the store was cleared) makes every process that reads the heads replace its
        index by this snapshot, not only new ones; by default the snapshot keeps the log's current epoch.
        """
        pointer = self.store(index, covers, epoch=self.log.epoch if epoch is None else epoch)
        previous = self.point(pointer)
        self.clean(pointer, covers, previous)
        return pointer

    def store(self, index: Sequence[Buffer], covers: dict[str, int], *, epoch: int) -> dict[str, Any]:
        """Step 1: seal ``index`` (its bytes, in parts: never joined) with what it covers and store it in chunks as
        they are sealed; the pointer a head will carry.

        Nothing names it yet, so it needs no lock: the chunk ids are this writer's next snapshot's, which no other
        writer writes and no head names. A failed attempt leaves chunks that the next one overwrites (the same
        ids: only :meth:`point` moves on to the next number); an abandoned one is deleted (:meth:`discard`).
        """
        writer = self.log.ensure_writer()
        n = (int(self._own["n"]) if self._own is not None else 0) + 1
        header = json.dumps({"covers": covers}, separators=(",", ":")).encode("utf-8")
        chunks = self.log.records.put_sealed(
            "snap", f"{writer}|{n}", [struct.pack("<Q", len(header)), header, *index], self._chunk_ids(writer, n)
        )
        return {"writer": writer, "n": n, "chunks": chunks, "covered": sum(covers.values()), "epoch": int(epoch)}

    def point(self, pointer: dict[str, Any]) -> dict[str, Any] | None:
        """Step 2: append an empty segment whose head names the stored snapshot (durable from here); the snapshot
        of this writer's that it replaces (:meth:`clean` deletes it).

        The snapshot becomes this writer's own *before* the head is written: should the append fail after a head
        named it, the next snapshot takes the next number and deletes this one, never overwrites chunks a head
        may name.
        """
        log = self.log
        previous, self._own = self._own, pointer
        log.epoch = int(pointer["epoch"])
        log.snapshot = pointer
        log.append()  # an empty segment: its head names the snapshot, which is durable from here
        self.written += 1
        return previous

    def clean(self, pointer: dict[str, Any], covers: dict[str, int], previous: dict[str, Any] | None) -> None:
        """Step 3 (best effort): delete ``previous``, the other writers' heads and the segments that ``covers``
        names, and nothing past it: a segment written after the snapshot's index was taken is not in it."""
        log, writer = self.log, str(pointer["writer"])
        # other writers' heads that the snapshot covers: a writer that writes again writes a new head
        searched = dict(log.searched_heads)
        stale = [log.records.head_id(w, s) for w, s in searched.items() if w != writer and s <= covers.get(w, 0)]
        if previous is not None:
            ids = self._chunk_ids(str(previous["writer"]), int(previous["n"]))
            stale += [ids(c) for c in range(int(previous["chunks"]))]
        self._delete(stale + self._covered_segments(covers))
        logger.info(
            "compacted the sealed index: a snapshot in %d store records covers %d segments",
            pointer["chunks"],
            pointer["covered"],
        )

    def discard(self, pointer: dict[str, Any]) -> None:
        """Delete a stored snapshot that no head names (abandoned before :meth:`point`): best effort."""
        ids = self._chunk_ids(str(pointer["writer"]), int(pointer["n"]))
        self._delete([ids(c) for c in range(int(pointer["chunks"]))])

    def _covered_segments(self, covers: dict[str, int]) -> list[str]:
        ids: list[str] = []
        for writer, upto in covers.items():
            for seq in range(self._deleted.get(writer, 0) + 1, upto + 1):
                chunks = self.log.records.chunks_of(writer, seq)
                ids += [self.log.records.chunk_id(writer, seq, c) for c in range(chunks)]
            self._deleted[writer] = max(self._deleted.get(writer, 0), upto)
        self.log.forget_chunks(covers)
        return ids

    def _delete(self, ids: Sequence[str]) -> None:
        batch = self.log.records.write_batch  # a server's: small calls, so searches get through in between
        for start in range(0, len(ids), batch):
            try:
                self.log.records.port.delete(list(ids[start : start + batch]))
            except Exception as exc:  # clean-up only: the snapshot is durable, and nothing is lost
                logger.warning("a compaction could not delete %d covered log records: %s", len(ids) - start, exc)
                return

    # -- reading -----------------------------------------------------------------------------------

    def candidates(self) -> list[dict[str, Any]]:
        """The snapshots the heads named, newest (most segments covered) first, each once."""
        seen: dict[tuple[str, int], dict[str, Any]] = {}
        for p in [*self.log.snapshots, *([self.log.snapshot] if self.log.snapshot else [])]:
            seen.setdefault((str(p["writer"]), int(p["n"])), p)
        return sorted(seen.values(), key=snapshot_order, reverse=True)

    def read(self, pointer: dict[str, Any]) -> tuple[dict[str, int], bytes]:
        """What a snapshot covers, and its index bytes.

        Raises:
            IndexRollbackError: A chunk is missing (a newer snapshot replaced it meanwhile).
            IndexTamperedError: It does not open under this key and tenant.
        """
        writer, n = str(pointer["writer"]), int(pointer["n"])
        ids = self._chunk_ids(writer, n)
        got = self.log.records.port.get([ids(0)])
        if not got:
            raise IndexRollbackError("an index snapshot is missing: replaced by a newer one, or deleted")
        if chunk_count(got[0]) != int(pointer["chunks"]):
            raise IndexTamperedError("an index snapshot's chunk count is not the one its head names: edited")
        plain = self.log.records.read_sealed("snap", f"{writer}|{n}", got[0], ids)
        try:
            (size,) = struct.unpack_from("<Q", plain, 0)
            covers = {str(w): int(s) for w, s in json.loads(plain[8 : 8 + size].decode("utf-8"))["covers"].items()}
        except (struct.error, ValueError, KeyError, AttributeError):
            raise IndexTamperedError("an index snapshot's header does not read: edited") from None
        return covers, plain[8 + size :]

    def load(self, restore: Callable[[bytes], None], *, writer: str | None = None, seq: int = 0) -> bool:
        """Restore the newest readable snapshot (one that covers ``writer``'s segment ``seq``, if given) through
        ``restore``, and start the log from it; whether one was restored."""
        for pointer in self.candidates():
            try:
                covers, index = self.read(pointer)
            except IndexRollbackError:
                continue  # replaced by a newer snapshot after the heads were read: an older one may still serve
            if writer is not None and covers.get(writer, 0) < seq:
                continue
            restore(index)
            self.log.start_from(covers, epoch=int(pointer.get("epoch", 0)))
            for w, s in covers.items():
                self._deleted[w] = max(self._deleted.get(w, 0), s)
            self.loaded += 1
            logger.info("opened the sealed index from a snapshot covering %d segments", pointer["covered"])
            return True
        return False
