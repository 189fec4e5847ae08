"""What the store-held index's unit tests share: one key, small unit vectors, and a "process" over a port."""

from __future__ import annotations

import numpy as np

from textcrafter_rag.sealed import StoreIndex, StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

KEY = SecretKey(bytes(range(32)))
DIM = 16


def vectors(n: int, seed: int) -> np.ndarray:
    """``n`` random unit vectors of :data:`DIM` dimensions, the same for the same seed."""
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def process(port: MemoryPort, **options) -> StoreIndex:
    """What a new process builds: the key, the store, nothing else (no compaction unless asked)."""
    options.setdefault("compact_every", 0)
    return StoreIndex(KEY, tenant="t", options=StoreIndexSearch(**options), port=port, dim=DIM)


def kinds(port: MemoryPort) -> dict[str, int]:
    """How many records of each kind the port holds (``seg``, ``head``, ``snap``; ``data`` for the rest)."""
    out: dict[str, int] = {}
    for r in port.records.values():
        kind = r.fields.get(LOG_FIELD, "data")
        out[kind] = out.get(kind, 0) + 1
    return out


def write_in_batches(index: StoreIndex, x: np.ndarray, *, prefix: str, first: int = 0, batch: int = 10) -> None:
    """Add ``x`` as ``{prefix}{first}``, ``{prefix}{first + 1}``, ..., ``batch`` records a segment."""
    for start in range(0, len(x), batch):
        index.add([f"{prefix}{first + i}" for i in range(start, start + batch)], x[start : start + batch])
