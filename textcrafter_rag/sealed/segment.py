"""One entry of the sealed index log: a batch of index changes, as one sealed message in the store."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError

__all__ = ["Probe", "Segment"]


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


@dataclass(frozen=True)
class Probe:
    """The log read a search leaves to its read of records (:meth:`IndexLog.probe_later`).

    Attributes:
        ids: Store ids to read (each writer's next segment); empty when the log was read already.
        heads: The heads as read (writer: sequence number).
        applied: What was applied when the heads were read (a change since: the log is read again).
        epoch: The epoch then.
    """

    ids: list[str]
    heads: dict[str, int]
    applied: dict[str, int]
    epoch: int
