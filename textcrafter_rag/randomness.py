"""Noise sources: a seedable PRNG for experiments and a CSPRNG for production.

Every mechanism draws its randomness from one :class:`NoiseSource`. The seeded
source (numpy PCG64) is reproducible, which is what tests and benchmarks need and
exactly what a privacy deployment must avoid: a fixed seed releases identical noise
for identical inputs, so an attacker who sees two releases of the same text can
cancel the noise. ``secure_mode=True`` draws from the operating system's CSPRNG
(``os.urandom``), as opacus does for its ``secure_mode``.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from abc import ABC, abstractmethod

import numpy as np

from .errors import InvalidInputError

__all__ = ["NoiseSource", "SeededNoise", "SecureNoise", "make_noise_source", "SeedWarning"]


class SeedWarning(UserWarning):
    """A fixed seed was set on a path that releases protected vectors."""


class NoiseSource(ABC):
    """Thread-safe source of standard normals, uniforms and permutations."""

    secure: bool = False

    @abstractmethod
    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return i.i.d. standard normal float64 samples."""

    @abstractmethod
    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return i.i.d. uniform float64 samples in the open interval (0, 1)."""

    @abstractmethod
    def permutation(self, n: int) -> np.ndarray:
        """Return a uniformly random permutation of ``range(n)``."""


class SeededNoise(NoiseSource):
    """Reproducible noise from numpy's PCG64 generator (``seed=None`` draws OS entropy once)."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        with self._lock:
            return self._rng.standard_normal(shape)

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        with self._lock:
            u = self._rng.random(shape)
        return np.clip(u, np.finfo(np.float64).tiny, 1.0 - 2**-53)

    def permutation(self, n: int) -> np.ndarray:
        with self._lock:
            return self._rng.permutation(n)


class SecureNoise(NoiseSource):
    """Noise from the OS CSPRNG: 53-bit uniforms from ``os.urandom``, normals by Box-Muller."""

    secure = True

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        # (k + 0.5) / 2^53 lies strictly inside (0, 1).
        return ((words.astype(np.float64) + 0.5) * 2.0**-53).reshape(shape)

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        m = (n + 1) // 2
        u1 = self.uniform((m,))
        u2 = self.uniform((m,))
        r = np.sqrt(-2.0 * np.log(u1))
        theta = 2.0 * math.pi * u2
        z = np.concatenate([r * np.cos(theta), r * np.sin(theta)])[:n]
        return z.reshape(shape)

    def permutation(self, n: int) -> np.ndarray:
        # Fisher-Yates with unbiased CSPRNG indices.
        import secrets

        perm = np.arange(n)
        for i in range(n - 1, 0, -1):
            j = secrets.randbelow(i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        return perm


def make_noise_source(*, seed: int | None, secure_mode: bool, owner: str) -> NoiseSource:
    """Build the noise source for a mechanism.

    Args:
        seed: Fixed seed for reproducible experiments; warns, since identical inputs then
            receive identical noise.
        secure_mode: Draw from the OS CSPRNG. Incompatible with ``seed``.
        owner: Name used in the warning.
    """
    if secure_mode:
        if seed is not None:
            raise InvalidInputError("secure_mode=True cannot be combined with a fixed seed")
        return SecureNoise()
    if seed is not None:
        warnings.warn(
            f"{owner} uses a fixed seed: identical inputs receive identical noise, so repeated "
            "releases can be averaged or compared by an attacker. Use seeds for experiments only.",
            SeedWarning,
            stacklevel=4,
        )
    return SeededNoise(seed)
