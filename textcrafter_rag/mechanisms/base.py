"""The one interface every defense implements: ``protect(x[n, D]) -> x'[n, D]``."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ..randomness import NoiseSource, make_noise_source
from ..validation import check_released, check_vectors

__all__ = ["Mechanism"]

_LOCK_TYPE = type(threading.Lock())
_LOCKS = "__locks__"  # names of the locks a pickled mechanism had (re-created, never copied)


class Mechanism(ABC):
    """A randomised map applied row-wise to a batch of embeddings.

    Subclasses validate their parameters in ``__init__`` (keyword-only) and implement
    :meth:`_protect` on a validated float32 batch. :meth:`protect` is the public entry
    point: it validates input, runs the mechanism on a copy, checks the output, and
    either returns a complete protected batch or raises (never a partial batch).

    Args:
        seed: Seed for reproducible experiments (warns: identical inputs get identical noise).
        secure_mode: Draw noise from the OS CSPRNG instead of a PRNG.
    """

    name: ClassVar[str] = "mechanism"
    #: True when the output norm does not depend on random draws (TextCrafter, Purkayastha).
    deterministic_norm: ClassVar[bool] = False

    def __init__(self, *, seed: int | None = None, secure_mode: bool = False) -> None:
        self.seed = seed
        self.secure_mode = bool(secure_mode)
        self._noise: NoiseSource = make_noise_source(seed=seed, secure_mode=secure_mode, owner=type(self).__name__)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int | None:
        """The dimension this mechanism is bound to, or ``None`` if it accepts any."""
        return None

    def protect(self, x: Any) -> np.ndarray:
        """Protect a batch of embeddings.

        Args:
            x: Float array of shape ``(n, D)``; float16/float64 are accepted and computed in float32.

        Returns:
            A new float32 array of shape ``(n, D)``.

        Raises:
            InvalidTypeError: Non-float input.
            InvalidInputError: Wrong shape or dimension, empty batch, NaN/Inf or all-zero rows.
            ProtectionError: A row too large for the mechanism's float32 arithmetic (named).
        """
        return self._release(check_vectors(x, dim=self.dim))

    def __getstate__(self) -> dict[str, Any]:
        locks = [k for k, v in self.__dict__.items() if isinstance(v, _LOCK_TYPE)]
        state = {k: v for k, v in self.__dict__.items() if k not in locks}
        state[_LOCKS] = locks
        state.pop("_noise", None)  # never copied: see __setstate__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (another process of a pool) gets its own locks and its own noise source.

        Why: a copied generator state would give the copy the same noise draws as the original, and
        two releases with the same noise leak their difference. Unseeded, the copy's noise is fresh;
        seeded (experiments), it restarts from the seed.
        """
        state = dict(state)
        for name in state.pop(_LOCKS, ["_lock"]):
            state[name] = threading.Lock()
        self.__dict__.update(state)
        self._noise = make_noise_source(seed=self.seed, secure_mode=self.secure_mode, owner=type(self).__name__)

    def _release(self, x32: np.ndarray) -> np.ndarray:
        """Protect an already validated float32 batch and check the output (no second validation copy)."""
        with np.errstate(over="ignore", invalid="ignore"):  # checked below, row by row
            out = np.asarray(self._protect(x32), dtype=np.float32)
        return check_released(out, shape=x32.shape, by=type(self).__name__)

    @abstractmethod
    def _protect(self, x: np.ndarray) -> np.ndarray:
        """Protect a validated, contiguous float32 batch (a private copy the mechanism may modify)."""

    def params(self) -> dict[str, Any]:
        """The mechanism's public parameters, for result tables."""
        return {}

    def expected_norm(self, dim: int) -> float | None:
        """Expected perturbation norm ``E||x' - x||`` for unit-norm inputs of dimension ``dim``, if defined."""
        return None

    def spec(self) -> str:
        """A string that :func:`textcrafter_rag.mechanisms.from_spec` turns back into this mechanism."""
        p = self.params()
        return self.name + (":" + ",".join(f"{k}={v}" for k, v in p.items()) if p else "")

    def __repr__(self) -> str:
        p = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({p})"
