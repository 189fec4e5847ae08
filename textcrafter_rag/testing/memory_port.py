"""A :class:`~textcrafter_rag.sealed.port.RecordPort` over a dict, exact search: for tests of the core.

It can be told to answer the next ``get`` or ``search`` with nothing (a lagging replica, a malicious host),
or to raise on the ``n``-th ``put`` (a crash between two writes), so the write protocol's properties are
tested at a chosen point, never by timing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import TextcrafterError
from ..sealed.port import PortRecord

__all__ = ["CrashAt", "MemoryPort"]


class CrashAt(TextcrafterError, RuntimeError):
    """Raised by :class:`MemoryPort` at the ``put`` it was told to fail (the write does not happen)."""


class MemoryPort:
    """Records in a dict; ``search`` ranks by exact inner product.

    ``replaces_records``: say that ``put`` replaces a held record (it does), so the index log keeps its beacon
    (:func:`~textcrafter_rag.sealed.port.replaces_records`); off by default, where every search reads the heads.
    """

    def __init__(self, *, replaces_records: bool = False) -> None:
        self.replaces_records = replaces_records
        self.records: dict[str, PortRecord] = {}
        self.empty_answers = 0
        self.crash_at_put: int | None = None
        self.puts = 0

    def put(self, records: Sequence[PortRecord]) -> None:
        self.puts += 1
        if self.crash_at_put is not None and self.puts == self.crash_at_put:
            raise CrashAt(f"put {self.puts} failed")
        for rec in records:
            self.records[rec.id] = rec

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        if self.empty_answers:
            self.empty_answers -= 1
            return []
        return [self.records[i] for i in ids if i in self.records]

    def delete(self, ids: Sequence[str]) -> None:
        for i in ids:
            self.records.pop(i, None)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        """The ``k`` records of highest inner product, best first, ties in the port's order (first put, first).

        Ranked in one pass that holds ``k`` records, not one score a record: the memory benchmark builds an index
        beside a port of thousands of log records, and a search's scores of them all, freed after it, were free
        heap the process kept (``benchmarks/results/store_index_memory_port.md``).
        """
        if self.empty_answers:
            self.empty_answers -= 1
            return []
        q = np.asarray(vector, dtype=np.float64)
        held = (r for r in self.records.values() if r.vector is not None)
        return heapq.nlargest(k, held, key=lambda r: float(np.dot(q, np.asarray(r.vector, np.float64))))

    def enumerate(self, batch_size: int) -> Iterator[list[PortRecord]]:
        items = list(self.records.values())
        for start in range(0, len(items), batch_size):
            yield items[start : start + batch_size]
