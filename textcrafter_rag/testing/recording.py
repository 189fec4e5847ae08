"""A mechanism that records what it saw and released, for tests.

:class:`RecordingMechanism` wraps any mechanism and keeps every batch it saw and released, so a
test can check that what reached a vector store is exactly the protected output (never the raw
input). Keep it out of production: it holds raw vectors in memory.
"""

from __future__ import annotations

import numpy as np

from ..mechanisms import Mechanism

__all__ = ["RecordingMechanism"]


class RecordingMechanism(Mechanism):
    """Delegate to ``inner`` and record each protected batch (``inputs``, ``outputs``)."""

    name = "recording"

    def __init__(self, inner: Mechanism) -> None:
        super().__init__()
        self.inner = inner
        self.secure_mode = inner.secure_mode
        self.inputs: list[np.ndarray] = []
        self.outputs: list[np.ndarray] = []

    @property
    def dim(self) -> int | None:
        return self.inner.dim

    def _protect(self, x: np.ndarray) -> np.ndarray:
        out = self.inner.protect(x)
        with self._lock:
            self.inputs.append(x.copy())
            self.outputs.append(out.copy())
        return out

    def all_outputs(self) -> np.ndarray:
        """Every released row, in call order."""
        return np.concatenate(self.outputs) if self.outputs else np.empty((0, 0), np.float32)
