"""Baselines without a privacy accountant: identity, shuffling and isotropic Gaussian noise."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidInputError
from .base import Mechanism

__all__ = ["NoDefense", "Shuffle", "GaussianNoise"]


class NoDefense(Mechanism):
    """The identity: releases the embedding unchanged (the ``none`` reference row)."""

    name: ClassVar[str] = "none"

    def __init__(self) -> None:
        super().__init__()  # draws no randomness

    def _protect(self, x: np.ndarray) -> np.ndarray:
        return x

    def expected_norm(self, dim: int) -> float:
        return 0.0


class Shuffle(Mechanism):
    """A secret random permutation of the hidden dimensions (the paper's shuffling baseline).

    One permutation is drawn per dimension on first use and then kept, so documents and
    queries protected by the same instance stay comparable. The permutation is the secret.
    """

    name: ClassVar[str] = "shuffle"

    def __init__(self, *, seed: int | None = None, secure_mode: bool = False) -> None:
        super().__init__(seed=seed, secure_mode=secure_mode)
        self._perms: dict[int, np.ndarray] = {}

    def permutation(self, dim: int) -> np.ndarray:
        """The secret permutation used for dimension ``dim`` (drawn once, never the identity)."""
        with self._lock:
            if dim not in self._perms:
                perm = self._noise.permutation(dim)
                while dim > 1 and np.array_equal(perm, np.arange(dim)):
                    perm = self._noise.permutation(dim)
                self._perms[dim] = perm
            return self._perms[dim]

    def _protect(self, x: np.ndarray) -> np.ndarray:
        return x[:, self.permutation(x.shape[1])]


def _chi_mean(dim: int) -> float:
    """E||z|| for z ~ N(0, I_dim)."""
    return math.sqrt(2.0) * math.exp(math.lgamma((dim + 1) / 2.0) - math.lgamma(dim / 2.0))


class GaussianNoise(Mechanism):
    """Isotropic Gaussian noise ``x + N(0, s^2 I)`` (no formal guarantee).

    Args:
        s: Per-coordinate standard deviation (> 0). The expected perturbation norm is
            about ``s * sqrt(D)``; see :meth:`expected_norm`.
    """

    name: ClassVar[str] = "gaussian"

    def __init__(self, *, s: float, seed: int | None = None, secure_mode: bool = False) -> None:
        if not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0):
            raise InvalidInputError(f"s must be a finite number > 0, got {s!r}")
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.s = float(s)

    @classmethod
    def at_norm(cls, norm: float, *, dim: int, **kwargs: Any) -> GaussianNoise:
        """The Gaussian mechanism whose expected perturbation norm equals ``norm`` in dimension ``dim``."""
        return cls(s=norm / _chi_mean(dim), **kwargs)

    def _protect(self, x: np.ndarray) -> np.ndarray:
        return x + (self.s * self._noise.normal(x.shape)).astype(np.float32)

    def params(self) -> dict[str, Any]:
        return {"s": self.s}

    def expected_norm(self, dim: int) -> float:
        return self.s * _chi_mean(dim)
