"""One entry of the sealed index log: a batch of index changes, as one sealed message in the store."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError

__all__ = ["HeadsAhead", "Probe", "Segment"]


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


class HeadsAhead:
    """A search of the heads made in a thread of its own (:meth:`IndexLog.probe_ahead`): :meth:`join` waits for it
    and gives the heads, or raises what the search raised (a rollback, the store's error)."""

    def __init__(self, search: Callable[[], dict[str, int]]) -> None:
        self._heads: dict[str, int] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(search,), name="textcrafter-heads", daemon=True)
        self._thread.start()

    def _run(self, search: Callable[[], dict[str, int]]) -> None:
        try:
            self._heads = search()
        except BaseException as exc:  # handed to whoever joins: the search that needs the heads fails with it
            self._error = exc

    def join(self) -> dict[str, int]:
        """The heads (writer: sequence number), once the search is done; raises what it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._heads is not None
        return self._heads


@dataclass(frozen=True)
class Probe:
    """The log read a search leaves to its read of records (:meth:`IndexLog.probe_later`,
    :meth:`IndexLog.probe_ahead`).

    Attributes:
        ids: Store ids to read (each writer's next segment); empty when the log was read already.
        heads: The heads as read (writer: sequence number); ``{}`` while :attr:`ahead` searches them.
        applied: What was applied when the probe was taken (a change since: the log is read again).
        epoch: The epoch then.
        ahead: The heads' search still under way (``None``: read before the probe was taken).
        beacon: The heads are not read: the log's beacon, read with :attr:`ids`, says whether to search them
            (:meth:`IndexLog.probe_beacon`).
    """

    ids: list[str]
    heads: dict[str, int]
    applied: dict[str, int]
    epoch: int
    ahead: HeadsAhead | None = None
    beacon: bool = False

    def read_heads(self) -> dict[str, int]:
        """The heads, once read (waits for :attr:`ahead`)."""
        return self.heads if self.ahead is None else self.ahead.join()
