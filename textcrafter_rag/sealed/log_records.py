"""How the index log's messages become store records: keyed ids, keyed vectors, sealing and chunks.

Every log message (a segment, a head, a compaction snapshot) is sealed as one AES-256-GCM message under the
key's ``"store-index"`` subkey for the tenant, its associated data naming its kind, its identity and the tenant,
base64'd and cut into chunks of at most ``segment_chars`` characters (Milvus VARCHAR holds 65,535). Each chunk is
a store record under a keyed id, stored under a keyed random vector; the first chunk's plain fields name the
chunk count. The store sees ciphertext, chunk counts and sizes; never an id, a vector or a text of the index.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import secrets
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import InvalidInputError, TextcrafterError
from ..keyed import keyed_normals
from ..logs import logger
from ..numerics import unit_rows
from ..sealing import NotPicklable, SecretKey
from .layout import CHUNKS_FIELD, LOG_FIELD
from .port import PortRecord, RecordPort, concurrent_calls
from .segment import Segment

__all__ = [
    "DEFAULT_SEGMENT_CHARS",
    "Beacon",
    "IndexLogError",
    "IndexRollbackError",
    "IndexTamperedError",
    "LOG_WRITE_BATCH",
    "LogRecords",
    "SegmentGapError",
    "snapshot_order",
]

#: Characters of sealed text per log record (Milvus VARCHAR holds 65,535).
DEFAULT_SEGMENT_CHARS = 60_000
_PREFIX = "tclog1."
_FORMAT = b"TCLOG1"
_NONCE = 12
#: How close a head's vector is to the "heads" direction: cosine 1/sqrt(1 + 0.3**2) = 0.958, far above the
#: cosine of any keyed random vector with it (about 5/sqrt(dim) at the very most).
_HEAD_SPREAD = 0.3
#: Chunks read by one store call (60,000 characters each).
_CHUNK_BATCH = 64
#: Log records written or deleted by one call to a server's store (:attr:`LogRecords.write_batch`). A Chroma server
#: answers no search while it stores or deletes (full chunks are costly to its full-text index): a compaction's
#: delete of 1,000 chunks in one call held another process's searches for as long as it ran (a hand check). Small
#: calls let them through. An in-process store serves no other process: it takes :data:`_CHUNK_BATCH` a call.
LOG_WRITE_BATCH = 8
#: Bytes :meth:`LogRecords.put_sealed` seals and encodes at a time (a multiple of 3, so that the base64 of the
#: blocks joins into the base64 of the whole): no single call holds Python's GIL for a whole snapshot, where one
#: call sealing a million records' snapshot (76 MB) held it for long stretches (a hand check), and a write or a
#: search in another thread of the process waited for each.
_SEAL_BLOCK = 3 << 20
#: The URL-safe base64 alphabet the records are written in, mapped to the standard one ``binascii`` reads.
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
#: What :meth:`LogRecords.put_sealed` takes a message's parts as: anything with a flat byte buffer.
Buffer = bytes | bytearray | memoryview | np.ndarray
_KINDS = {"seg": "segment", "snap": "snapshot", "head": "head", "beacon": "beacon"}


class IndexLogError(TextcrafterError, RuntimeError):
    """The sealed index log in the store is not what this process expects."""


class IndexRollbackError(IndexLogError):
    """A head is older than one seen before, or a segment below a head is missing: rolled back or deleted."""


class IndexTamperedError(IndexLogError):
    """A log record under this key and tenant's id does not open: edited, swapped or truncated."""


class LogRecords(NotPicklable):
    """The store records of one key and tenant's index log.

    Args:
        key: The store's key.
        tenant: The tenant.
        port: The store.
        dim: The dimension of the vectors the store holds (log records are stored under vectors of it).
        segment_chars: Characters of sealed text per store record.
    """

    __slots__ = (
        "_aead",
        "_chunks",
        "_cipher",
        "_id_key",
        "_tenant",
        "_vector_key",
        "dim",
        "port",
        "segment_chars",
        "write_batch",
    )

    def __init__(self, key: SecretKey, *, tenant: str, port: RecordPort, dim: int, segment_chars: int) -> None:
        subkey = SecretKey(key).subkey("store-index", context=tenant)
        self._aead = AESGCM(subkey)
        self._cipher = algorithms.AES(subkey)  # the same AES-GCM as a stream (:meth:`_sealed_pieces`)
        self._id_key = hmac.new(subkey, b"log-record-ids", hashlib.sha256).digest()
        self._vector_key = hmac.new(subkey, b"log-record-vectors", hashlib.sha256).digest()
        self._tenant = tenant
        self.port = port
        #: Log records written or deleted by one store call (:data:`LOG_WRITE_BATCH` for a server's client).
        self.write_batch = LOG_WRITE_BATCH if concurrent_calls(port) else _CHUNK_BATCH
        self.dim = int(dim)
        if segment_chars < 1024:
            raise InvalidInputError(f"segment_chars must be at least 1024, got {segment_chars}")
        self.segment_chars = int(segment_chars)
        #: Chunk counts of the multi-chunk segments this process wrote or read (a compaction deletes them).
        self._chunks: dict[tuple[str, int], int] = {}

    # -- ids and vectors ---------------------------------------------------------------------------

    def record_id(self, label: str) -> str:
        """The store id of the log record ``label`` names (a keyed UUID4)."""
        digest = hmac.new(self._id_key, label.encode("utf-8"), hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def head_id(self, writer: str, seq: int) -> str:
        """The store id of a writer's head record at sequence ``seq``."""
        return self.record_id(f"head|{writer}|{seq}")

    def chunk_id(self, writer: str, seq: int, chunk: int) -> str:
        """The store id of one chunk of a segment."""
        return self.record_id(f"seg|{writer}|{seq}|{chunk}")

    def keyed(self, label: str) -> np.ndarray:
        """A keyed random unit vector (no relation to any text)."""
        seed = hmac.new(self._vector_key, label.encode("utf-8"), hashlib.sha256).digest()
        return unit_rows(keyed_normals(seed, self.dim, self.dim).reshape(1, -1))[0]

    def heads_direction(self) -> list[float]:
        """The vector a head search sends (constant per key and tenant)."""
        return self.keyed("heads").astype(np.float32).tolist()

    def head_vector(self, writer: str) -> list[float]:
        """A writer's head's vector: close to :meth:`heads_direction`, far from every other record's."""
        v = self.keyed("heads") + _HEAD_SPREAD * self.keyed(f"head|{writer}")
        return unit_rows(v.reshape(1, -1))[0].astype(np.float32).tolist()

    # -- sealing -----------------------------------------------------------------------------------

    def _aad(self, kind: str, ident: str) -> bytes:
        return b"\x00".join((_FORMAT, kind.encode(), ident.encode(), self._tenant.encode("utf-8")))

    def seal(self, plain: bytes, *, kind: str, ident: str) -> str:
        """One sealed text (prefixed, base64: the nonce, the AES-GCM ciphertext and its tag)."""
        return _PREFIX + "".join(self._sealed_pieces([plain], kind=kind, ident=ident, size=None))

    def open(self, text: str, *, kind: str, ident: str) -> bytes:
        """The plain bytes of a sealed text. Raises ``InvalidTag`` when it does not open."""
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise InvalidTag
        try:
            body = text[len(_PREFIX) :].encode("ascii").translate(_TO_STANDARD)
        except UnicodeEncodeError:
            raise InvalidTag from None
        return self.open_body(body, kind=kind, ident=ident)

    def open_body(self, body: bytes | bytearray, *, kind: str, ident: str) -> bytes:
        """The plain bytes of a sealed text's body: its base64 without the prefix, in the standard alphabet."""
        try:
            blob = binascii.a2b_base64(body)
        except binascii.Error:
            raise InvalidTag from None
        view = memoryview(blob)
        return self._aead.decrypt(view[:_NONCE], view[_NONCE:], self._aad(kind, ident))

    def delete_quietly(self, ids: list[str]) -> None:
        """Delete log records that are clean-up only (a compaction may have deleted them already: some stores
        refuse to delete an id they do not hold); a failure leaves an extra record, which loses nothing."""
        try:
            self.port.delete(ids)
        except Exception as exc:  # clean-up only, see above
            logger.info("a log record was not deleted (left for a later compaction): %s", exc)

    def put_head(self, writer: str, seq: int, head: dict[str, Any]) -> None:
        """Store ``writer``'s head at ``seq``: ``head`` as sealed JSON, under its keyed id, near the heads direction."""
        hid = self.head_id(writer, seq)
        text = self.seal(json.dumps(head).encode("utf-8"), kind="head", ident=hid)
        self.port.put([PortRecord(hid, text, {LOG_FIELD: "head"}, self.head_vector(writer))])

    # -- segments ----------------------------------------------------------------------------------

    def put_segment(self, seg: Segment) -> None:
        """Store one segment, sealed, in as many chunks as it takes (:meth:`put_sealed`)."""
        self._chunks.pop((seg.writer, seg.seq), None)
        ids = self._segment_chunk_ids(seg.writer, seg.seq)
        if (n := self.put_sealed("seg", f"{seg.writer}|{seg.seq}", [seg.encode()], ids)) > 1:
            self._chunks[(seg.writer, seg.seq)] = n

    def read_segment(self, writer: str, seq: int, first: PortRecord) -> Segment:
        """Open the segment ``(writer, seq)`` whose first chunk is ``first`` (the rest are read by id).

        Raises:
            IndexRollbackError: A chunk is missing.
            IndexTamperedError: It does not open, or names another writer, sequence or dimension.
        """
        plain = self.read_sealed("seg", f"{writer}|{seq}", first, self._segment_chunk_ids(writer, seq))
        if (n := chunk_count(first)) > 1:
            self._chunks[(writer, seq)] = n
        try:
            seg = Segment.decode(plain)
        except (ValueError, KeyError, struct.error):
            raise IndexTamperedError("an index segment does not open under this key and tenant: edited") from None
        if seg.writer != writer or seg.seq != seq or (seg.vectors.size and seg.vectors.shape[1] != self.dim):
            raise IndexTamperedError("an index segment names another writer, sequence or dimension: edited")
        return seg

    def chunks_of(self, writer: str, seq: int) -> int:
        """How many chunks a segment this process wrote or read has."""
        return self._chunks.get((writer, seq), 1)

    def forget_chunks(self, covers: dict[str, int]) -> None:
        """Drop the chunk counts of the segments ``covers`` names (a compaction deleted them)."""
        self._chunks = {k: n for k, n in self._chunks.items() if k[1] > covers.get(k[0], 0)}

    def _segment_chunk_ids(self, writer: str, seq: int) -> Callable[[int], str]:
        return lambda c: self.chunk_id(writer, seq, c)

    # -- chunked messages --------------------------------------------------------------------------

    def put_sealed(self, kind: str, ident: str, parts: Sequence[Buffer], ids: Callable[[int], str]) -> int:
        """Seal ``parts``, joined, as one message and store it in chunks under ``ids(0), ids(1), ...``; how many
        chunks.

        The message is given in parts so that no caller joins a large one first (a snapshot: the index's serialized
        bytes with a header), and its chunks are stored as they are made, :attr:`write_batch` a call, so the sealed
        text of a whole snapshot is never held at once. The call holding chunk 0 (the one readers look for, with the
        chunk count) is made last: a process killed between two calls leaves chunks no reader finds, never a first
        chunk whose others are missing (which a reader would take for a rollback).
        """

        def record(c: int, piece: str, fields: dict[str, str]) -> PortRecord:
            rid = ids(c)
            return PortRecord(rid, _PREFIX + piece, fields, self.keyed(rid).astype(np.float32).tolist())

        pieces = self._sealed_pieces(parts, kind=kind, ident=ident, size=self.segment_chars - len(_PREFIX))
        first, pending, count = next(pieces), [], 1
        for piece in pieces:
            pending.append(record(count, piece, {LOG_FIELD: kind}))
            count += 1
            if len(pending) == self.write_batch:
                self.port.put(pending)
                pending = []
        self.port.put([record(0, first, {LOG_FIELD: kind, CHUNKS_FIELD: str(count)}), *pending])
        return count

    def _sealed_pieces(self, parts: Sequence[Buffer], *, kind: str, ident: str, size: int | None) -> Iterator[str]:
        """:meth:`seal`'s text of ``parts`` joined, without its prefix, in pieces of ``size`` characters (``None``:
        one piece), made a block of at most :data:`_SEAL_BLOCK` bytes at a time (AES-GCM as a stream: the
        ciphertext and tag of one call), each piece given as soon as it is made; at least one piece."""
        nonce = secrets.token_bytes(_NONCE)
        encryptor = Cipher(self._cipher, modes.GCM(nonce)).encryptor()
        encryptor.authenticate_additional_data(self._aad(kind, ident))
        raw, text, given = nonce, "", False
        views = [memoryview(part).cast("B") for part in parts]
        blocks = (view[at : at + _SEAL_BLOCK] for view in views for at in range(0, len(view), _SEAL_BLOCK))
        for block in itertools.chain(blocks, [None]):
            if block is not None:
                raw += encryptor.update(block)
                cut = len(raw) - len(raw) % 3  # whole base64 quanta; the rest waits for the next block
            else:  # past the last block: the tag, and the padding once at the end
                raw += encryptor.finalize() + encryptor.tag
                cut = len(raw)
            text += base64.urlsafe_b64encode(raw[:cut]).decode("ascii")
            raw, start = raw[cut:], 0
            while size is not None and len(text) - start >= size:
                yield text[start : start + size]
                given, start = True, start + size
            text = text[start:]
        if text or not given:
            yield text

    def read_sealed(self, kind: str, ident: str, first: PortRecord, ids: Callable[[int], str]) -> bytes:
        """Open a message :meth:`put_sealed` stored, given its first chunk (the rest are read by id).

        Raises:
            IndexRollbackError: A chunk is missing (deleted, or rolled back).
            IndexTamperedError: The message does not open under this key and tenant, or names no chunk count.
        """
        n = chunk_count(first)
        # One buffer, filled a chunk at a time and doubled when full: a large snapshot leaves no trail of growing
        # copies in the process's heap, and a forged chunk count (a plain field) never sizes an allocation.
        head = _chunk_body(first.text)
        body, at = bytearray(head), len(head)
        for start in range(1, n, _CHUNK_BATCH):
            wanted = [ids(c) for c in range(start, min(start + _CHUNK_BATCH, n))]
            got = {r.id: r.text for r in self.port.get(wanted)}
            if len(got) != len(wanted):
                raise IndexRollbackError(f"an index {_KINDS[kind]} is missing chunks: deleted or rolled back")
            for i in wanted:
                piece = _chunk_body(got.pop(i))
                if at + len(piece) > len(body):
                    body.extend(bytes(max(len(body), len(piece))))
                body[at : at + len(piece)] = piece
                at += len(piece)
        del body[at:]
        try:
            return self.open_body(body, kind=kind, ident=ident)
        except InvalidTag:
            raise IndexTamperedError(
                f"an index {_KINDS[kind]} does not open under this key and tenant: edited"
            ) from None


class Beacon:
    """The log's beacon: one record that every write overwrites after its head with a value no write before
    stored, ``(writer, seq)`` sealed, on a store whose ``put`` replaces
    (:func:`~textcrafter_rag.sealed.port.replaces_records`). A reader that reads it, then searches the heads, holds
    every head written before the value it read; while the value it reads later is the same, no write has been
    made since (:meth:`IndexLog.probe_beacon`)."""

    __slots__ = ("_vector", "id", "records", "seen")

    def __init__(self, records: LogRecords) -> None:
        self.records = records
        self.id = records.record_id("beacon")
        self._vector = records.keyed(self.id).astype(np.float32).tolist()  # the same for every write
        #: The value read just before this process's last search of the heads (``None``: none yet).
        self.seen: str | None = None

    def put(self, writer: str, seq: int) -> None:
        """Overwrite the beacon with ``(writer, seq)`` (after that writer's head ``seq`` is stored)."""
        text = self.records.seal(json.dumps([writer, seq]).encode("utf-8"), kind="beacon", ident=self.id)
        self.records.port.put([PortRecord(self.id, text, {LOG_FIELD: "beacon"}, self._vector)])

    def heads(
        self, records: Sequence[PortRecord], known: dict[str, int], search: Callable[[], dict[str, int]]
    ) -> dict[str, int]:
        """The heads, given ``records`` read with the beacon: ``known`` while its value is the one :attr:`seen`,
        else ``search()``'s (made after that read), the value read becoming the one seen. An absent beacon, or
        one that does not open, is a change."""
        value = None
        for rec in records:
            if rec.id == self.id:
                try:
                    value = self.records.open(rec.text, kind="beacon", ident=self.id).decode("utf-8")
                except (InvalidTag, ValueError):
                    value = None
        if value is not None and value == self.seen:
            return known
        heads = search()
        self.seen = value
        return heads


def _chunk_body(text: object) -> bytes:
    """A chunk's base64 text without the prefix, as ASCII bytes in the standard alphabet."""
    if not isinstance(text, str) or not text.startswith(_PREFIX):
        raise IndexTamperedError("an index log record is not a sealed chunk: edited")
    try:
        return text[len(_PREFIX) :].encode("ascii").translate(_TO_STANDARD)
    except UnicodeEncodeError:
        raise IndexTamperedError("an index log record is not a sealed chunk: edited") from None


def chunk_count(first: PortRecord) -> int:
    """How many chunks a message's first chunk names.

    Raises:
        IndexTamperedError: It names no valid count.
    """
    try:
        n = int(first.fields.get(CHUNKS_FIELD, "1"))
    except (TypeError, ValueError):
        n = -1
    if not 1 <= n <= 1_000_000:
        raise IndexTamperedError("an index log record names no valid chunk count: edited")
    return n


def snapshot_order(pointer: dict[str, Any]) -> tuple[int, int]:
    """How new a snapshot a head names is: newer epochs (a cleared store) first, then the most segments covered."""
    return int(pointer.get("epoch", 0)), int(pointer.get("covered", 0))


class SegmentGapError(IndexRollbackError):
    """A segment below a head is missing: rolled back, or compacted into a snapshot (which then restores)."""

    def __init__(self, writer: str, seq: int, missing: int) -> None:
        super().__init__(
            f"an index segment below a head is missing ({missing} of them), and no snapshot covers it: the store's "
            "index was rolled back or edited; nothing past the gap was applied"
        )
        self.writer, self.seq = writer, seq
