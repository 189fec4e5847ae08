"""The sealed index's write log, kept in the user's own store: nothing acknowledged is lost by any process.

Stores give upsert, read by ids, delete and search by vector; none gives compare-and-swap or a reliable
listing. So no two processes ever write the same log record:

* **Writer logs.** Every :class:`IndexLog` that writes takes a fresh random 128-bit writer id and appends
  *segments* ``(writer, seq)`` (the index entries a batch adds, with their clean directions, and the ids it
  deletes), each sealed as one AES-256-GCM message under the key's ``"store-index"`` subkey for the tenant,
  base64'd and cut into chunks of at most ``segment_chars`` characters (Milvus VARCHAR holds 65,535), each
  chunk a store record under a keyed id.
* **Heads, found by search.** Each writer keeps one sealed head record ``head(writer, seq)`` naming its
  last sequence number; a new head is written before the previous one is deleted (no store is asked to
  overwrite a record, which FAISS and Milvus refuse), so a crash leaves two heads, never none. Heads are
  stored under keyed vectors close to one keyed "heads" direction, data records and segments under
  unrelated keyed random vectors, so a search for that direction returns every head first, on any store,
  without a listing API. Each head names the other writers its process knew, so a head that an approximate
  engine's search misses is still found through any head that names it.
* **Write order.** segment, then head, then (by the caller) the data records, then acknowledge. A crash
  after the segment leaves index entries whose records were never stored: a search reads them, finds no
  record, skips and counts them. No record is ever stored without an index entry.
* **Readers** (:meth:`IndexLog.refresh`, before each search by default) read the heads, then fetch by id
  every segment past the ones this process applied, *and one past each head* (a writer killed between its
  segment and its head), a few segments a writer at a time, and apply each writer's in its own sequence order,
  different writers' merged by (time, writer, seq): a writer's clock going back never reorders its own writes;
  two writers changing one id at the same moment are ordered by their clocks. A head lower than one seen before,
  or a segment missing below a head, raises :class:`IndexRollbackError`; a segment that does not open raises
  :class:`IndexTamperedError`. An error or an empty answer never removes an index entry: segments are only
  ever added to what a process holds.

What the store learns: the number, sizes and times of segments (write sizes and times), how many writers
there are, and that a search reads the heads. Not the ids, vectors or texts.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import json
import secrets
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import InvalidInputError, TextcrafterError
from ..keyed import keyed_normals
from ..numerics import unit_rows
from ..sealing import NotPicklable, SecretKey
from .layout import CHUNKS_FIELD, LOG_FIELD
from .port import PortRecord, RecordPort

__all__ = [
    "CHUNKS_FIELD",
    "DEFAULT_SEGMENT_CHARS",
    "LOG_FIELD",
    "IndexLog",
    "IndexLogError",
    "IndexRollbackError",
    "IndexTamperedError",
    "Segment",
]

#: Characters of sealed text per log record (Milvus VARCHAR holds 65,535).
DEFAULT_SEGMENT_CHARS = 60_000
_PREFIX = "tclog1."
_FORMAT = b"TCLOG1"
_NONCE = 12
#: How close a head's vector is to the "heads" direction: cosine 1/sqrt(1 + 0.3**2) = 0.958, far above the
#: cosine of any keyed random vector with it (about 5/sqrt(dim) at the very most).
_HEAD_SPREAD = 0.3
#: Records the first head search asks for (beyond the heads this process knows): one non-head ends the search.
_FIRST_HEAD_SEARCH = 4
#: Other writers a head names (the most recent ones this process knows): a head an approximate engine's
#: search missed is still found through any head that names its writer.
_NAMED_WRITERS = 256
#: Segments of one writer read (and held decoded) at a time while refreshing.
_READ_BATCH = 16


class IndexLogError(TextcrafterError, RuntimeError):
    """The sealed index log in the store is not what this process expects."""


class IndexRollbackError(IndexLogError):
    """A head is older than one seen before, or a segment below a head is missing: rolled back or deleted."""


class IndexTamperedError(IndexLogError):
    """A log record under this key and tenant's id does not open: edited, swapped or truncated."""


@dataclass(frozen=True)
class Segment:
    """One batch of index changes: ``adds`` (ids with clean directions, float16) and ``deletes`` (ids)."""

    writer: str
    seq: int
    ts: int
    adds: list[str]
    vectors: np.ndarray
    deletes: list[str]

    def encode(self) -> bytes:
        header = {
            "writer": self.writer,
            "seq": self.seq,
            "ts": self.ts,
            "dim": int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0,
            "adds": self.adds,
            "deletes": self.deletes,
        }
        head = json.dumps(header, separators=(",", ":")).encode("utf-8")
        return struct.pack("<Q", len(head)) + head + np.ascontiguousarray(self.vectors, dtype="<f2").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> Segment:
        (n,) = struct.unpack_from("<Q", data, 0)
        h = json.loads(data[8 : 8 + n].decode("utf-8"))
        adds = [str(i) for i in h["adds"]]
        vectors = np.frombuffer(data, dtype="<f2", offset=8 + n).reshape(len(adds), int(h["dim"]))
        if 8 + n + vectors.nbytes != len(data):
            raise InvalidInputError("an index segment has trailing bytes")
        return cls(str(h["writer"]), int(h["seq"]), int(h["ts"]), adds, vectors, [str(i) for i in h["deletes"]])


class IndexLog(NotPicklable):
    """One process's view of a store's sealed index log: it appends its own segments and reads everyone's.

    Args:
        key: The store's key.
        context: The tenant.
        port: The store (:class:`~textcrafter_rag.sealed.port.RecordPort`).
        dim: The dimension of the vectors the store holds (log records are stored under vectors of it).
        segment_chars: Characters of sealed text per log record.
    """

    __slots__ = (
        "_aead",
        "_applied",
        "_context",
        "_head_seen",
        "_id_key",
        "_lock",
        "_port",
        "_seq",
        "_vector_key",
        "_writer",
        "dim",
        "ignored",
        "others_seen",
        "segment_chars",
    )

    def __init__(
        self,
        key: SecretKey,
        *,
        context: str = "",
        port: RecordPort,
        dim: int,
        segment_chars: int = DEFAULT_SEGMENT_CHARS,
    ) -> None:
        subkey = SecretKey(key).subkey("store-index", context=context)
        self._aead = AESGCM(subkey)
        self._id_key = hmac.new(subkey, b"log-record-ids", hashlib.sha256).digest()
        self._vector_key = hmac.new(subkey, b"log-record-vectors", hashlib.sha256).digest()
        self._context = context
        self._port = port
        self.dim = int(dim)
        if segment_chars < 1024:
            raise InvalidInputError(f"segment_chars must be at least 1024, got {segment_chars}")
        self.segment_chars = int(segment_chars)
        self._writer: str | None = None
        self._seq = 0
        #: Highest segment applied per writer (this process's own included).
        self._applied: dict[str, int] = {}
        #: Highest head seen per writer (a lower one later is a rollback).
        self._head_seen: dict[str, int] = {}
        self._lock = threading.RLock()
        #: Whether the last head search returned records that are neither log records nor ``ignored``.
        self.others_seen = False
        #: Store ids of records that are not data (the store's marker record).
        self.ignored: set[str] = set()

    # -- ids, vectors and sealing ------------------------------------------------------------------

    def _id(self, label: str) -> str:
        digest = hmac.new(self._id_key, label.encode("utf-8"), hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def head_id(self, writer: str, seq: int) -> str:
        """The store id of a writer's head record at sequence ``seq``."""
        return self._id(f"head|{writer}|{seq}")

    def chunk_id(self, writer: str, seq: int, chunk: int) -> str:
        """The store id of one chunk of a segment."""
        return self._id(f"seg|{writer}|{seq}|{chunk}")

    def _keyed(self, label: str) -> np.ndarray:
        seed = hmac.new(self._vector_key, label.encode("utf-8"), hashlib.sha256).digest()
        return unit_rows(keyed_normals(seed, self.dim, self.dim).reshape(1, -1))[0]

    def heads_direction(self) -> list[float]:
        """The vector a head search sends (constant per key and tenant)."""
        return self._keyed("heads").astype(np.float32).tolist()

    def _head_vector(self, writer: str) -> list[float]:
        v = self._keyed("heads") + _HEAD_SPREAD * self._keyed(f"head|{writer}")
        return unit_rows(v.reshape(1, -1))[0].astype(np.float32).tolist()

    def _aad(self, kind: str, ident: str) -> bytes:
        return b"\x00".join((_FORMAT, kind.encode(), ident.encode(), self._context.encode("utf-8")))

    def _seal(self, plain: bytes, *, kind: str, ident: str) -> str:
        nonce = secrets.token_bytes(_NONCE)
        sealed = self._aead.encrypt(nonce, plain, self._aad(kind, ident))
        return _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def _open(self, text: str, *, kind: str, ident: str) -> bytes:
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise InvalidTag
        try:
            blob = base64.urlsafe_b64decode(text[len(_PREFIX) :].encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise InvalidTag from None
        return self._aead.decrypt(blob[:_NONCE], blob[_NONCE:], self._aad(kind, ident))

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
            if self._writer is None:
                self._writer = secrets.token_hex(16)
            seq = self._seq + 1
            seg = Segment(self._writer, seq, time.time_ns(), [str(i) for i in adds], vecs, [str(i) for i in deletes])
            self._port.put(self._segment_records(seg))
            self._seq = seq
            named = [w for w in self._head_seen if w != self._writer][-_NAMED_WRITERS:]
            head = json.dumps({"writer": self._writer, "seq": seq, "ts": seg.ts, "seen": named}).encode("utf-8")
            hid = self.head_id(self._writer, seq)
            self._port.put(
                [
                    PortRecord(
                        hid,
                        self._seal(head, kind="head", ident=hid),
                        {LOG_FIELD: "head"},
                        self._head_vector(self._writer),
                    )
                ]
            )
            if seq > 1:
                self._port.delete([self.head_id(self._writer, seq - 1)])
            self._head_seen[self._writer] = seq
            if self._applied.get(self._writer, 0) == seq - 1:
                self._applied[self._writer] = seq
            return seg

    def _segment_records(self, seg: Segment) -> list[PortRecord]:
        text = self._seal(seg.encode(), kind="seg", ident=f"{seg.writer}|{seg.seq}")
        body = text[len(_PREFIX) :]
        size = self.segment_chars - len(_PREFIX)
        pieces = [body[i : i + size] for i in range(0, len(body), size)] or [""]
        out = []
        for c, piece in enumerate(pieces):
            rid = self.chunk_id(seg.writer, seg.seq, c)
            fields = {LOG_FIELD: "seg", CHUNKS_FIELD: str(len(pieces))} if c == 0 else {LOG_FIELD: "seg"}
            out.append(PortRecord(rid, _PREFIX + piece, fields, self._keyed(rid).astype(np.float32).tolist()))
        return out

    # -- reading -----------------------------------------------------------------------------------

    def heads(self) -> dict[str, int]:
        """Every writer's last sequence number, as the store's heads say (searched, then known ones by id).

        Heads that do not open (another tenant's in the same collection) are passed over.

        Raises:
            IndexRollbackError: A head is lower than one this process saw before.
        """
        found: dict[str, int] = {}
        named: set[str] = set()
        k = len(self._head_seen) + _FIRST_HEAD_SEARCH
        while True:
            hits = self._port.search(self.heads_direction(), k)
            self.others_seen = any(r.fields.get(LOG_FIELD) is None and r.id not in self.ignored for r in hits)
            for rec in hits:
                self._read_head(rec, found, named)
            if len(hits) < k or any(rec.fields.get(LOG_FIELD) != "head" for rec in hits):
                break  # every head ranks above every other record: one non-head means all heads were returned
            k *= 4
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
        return found

    def _read_head(self, rec: PortRecord, found: dict[str, int], named: set[str]) -> None:
        if rec.fields.get(LOG_FIELD) != "head":
            return
        try:
            head = json.loads(self._open(rec.text, kind="head", ident=rec.id))
        except (InvalidTag, ValueError):
            return  # another tenant's head under the same collection (or a forged one): never ours
        writer, seq = str(head["writer"]), int(head["seq"])
        if self.head_id(writer, seq) != rec.id:
            return
        found[writer] = max(found.get(writer, 0), seq)
        named.update(str(w) for w in head.get("seen", ()))

    def refresh(self, apply: Callable[[Segment], None]) -> int:
        """Hand ``apply`` the segments written since this process last read; how many it was handed.

        Each writer's segments come in sequence order; different writers' are merged by (time, writer, seq).
        One read fetches every writer's next segments (one past its head at least); a writer with more is
        then read :data:`_READ_BATCH` segments at a time, so opening a large log holds a few segments a writer
        in memory, never the whole log.

        Raises:
            IndexRollbackError: A head went back (nothing is handed over), or a segment below a head is missing
                (the segments before the gap were handed over; none after it).
            IndexTamperedError: A segment under this key's id does not open.
        """
        with self._lock:
            heads = self.heads()
            wanted = [cid for w in heads for cid in self._batch_ids(w, self._applied.get(w, 0) + 1, heads[w])]
            got = {r.id: r for r in self._port.get(wanted)} if wanted else {}
            streams = [self._segments(w, heads[w], got) for w in heads]
            count = 0
            for _, _, _, seg in heapq.merge(*streams):
                apply(seg)
                self._applied[seg.writer] = max(self._applied.get(seg.writer, 0), seg.seq)
                count += 1
            return count

    def _batch_ids(self, writer: str, seq: int, head: int) -> list[str]:
        """The first-chunk ids of the next read of ``writer`` from ``seq``: up to one past its head, a batch at most."""
        return [self.chunk_id(writer, s, 0) for s in range(seq, seq + min(_READ_BATCH, max(1, head - seq + 2)))]

    def _segments(self, writer: str, head: int, got: dict[str, PortRecord]) -> Iterator[tuple[int, str, int, Segment]]:
        """One writer's segments past those applied, in sequence order: up to its head, then while any follow.

        ``got`` holds the first read's records (this writer's are taken out of it as they are read).
        """
        seq = self._applied.get(writer, 0) + 1
        asked = self._batch_ids(writer, seq, head)
        while True:
            batch = []
            while self.chunk_id(writer, seq, 0) in got:
                batch.append(self._read_segment(writer, seq, got.pop(self.chunk_id(writer, seq, 0))))
                seq += 1
            for cid in asked:
                got.pop(cid, None)
            if seq <= head and len(batch) < len(asked):
                raise IndexRollbackError(
                    f"an index segment below a head is missing ({head - seq + 1} of them): the store's index was "
                    "rolled back or edited; nothing past the gap was applied"
                )
            self._head_seen[writer] = max(self._head_seen.get(writer, 0), head)
            for seg in batch:
                yield seg.ts, seg.writer, seg.seq, seg
            if len(batch) < len(asked):  # the first missing sequence number past the head: the end
                return
            asked = self._batch_ids(writer, seq, head)
            got = {r.id: r for r in self._port.get(asked)}

    def _read_segment(self, writer: str, seq: int, first: PortRecord) -> Segment:
        try:
            n = int(first.fields.get(CHUNKS_FIELD, "1"))
        except ValueError:
            n = -1
        if not 1 <= n <= 1_000_000:
            raise IndexTamperedError("an index segment names no valid chunk count: edited")
        texts = [first.text]
        if n > 1:
            ids = [self.chunk_id(writer, seq, c) for c in range(1, n)]
            got = {r.id: r.text for r in self._port.get(ids)}
            if len(got) != len(ids):
                raise IndexRollbackError("an index segment is missing chunks: deleted or rolled back")
            texts += [got[i] for i in ids]
        text = texts[0] + "".join(t[len(_PREFIX) :] if isinstance(t, str) else "" for t in texts[1:])
        try:
            seg = Segment.decode(self._open(text, kind="seg", ident=f"{writer}|{seq}"))
        except (InvalidTag, ValueError, KeyError, struct.error):
            raise IndexTamperedError("an index segment does not open under this key and tenant: edited") from None
        if seg.writer != writer or seg.seq != seq or (seg.vectors.size and seg.vectors.shape[1] != self.dim):
            raise IndexTamperedError("an index segment names another writer, sequence or dimension: edited")
        return seg

    def __repr__(self) -> str:
        return f"IndexLog(writer={self._writer!r}, key=<redacted>)"
