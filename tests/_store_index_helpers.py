"""What the store-held index's unit tests share: one key, small unit vectors, and a "process" over a port."""

from __future__ import annotations

import numpy as np

from textcrafter_rag.sealed import StoreIndex, StoreIndexSearch
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
