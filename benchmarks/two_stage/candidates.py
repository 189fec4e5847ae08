"""Candidate mechanisms: what a two-stage store receives in place of each clean vector.

A candidate vector is ``x + r * u`` rescaled to the norm of ``x`` (:func:`noise_to_norm`), with ``u`` a unit
direction per row and ``r`` the strength. The mechanisms differ only in where ``u`` comes from:

* ``gaussian``: a standard Gaussian draw, normalised (what the sealed stores ship);
* ``textcrafter-eps1.0-dir`` / ``textcrafter-eps2.5-dir``: the shipped policy's own release direction
  ``(TextCrafter(x) - x) / ||.||``, moved to norm ``r``;
* ``nullspace``: the frontier's best mechanism (PII-predictive directions projected out of ``x``, then a
  Gaussian direction at norm ``r``, renormalised);
* ``textcrafter-eps1.0`` / ``textcrafter-eps2.5``: the shipped policies as released (their own norm, recorded
  as the strength), rescaled to the norm of ``x``.

:class:`CandidateMechanism` wraps one of them as a :class:`~textcrafter_rag.mechanisms.Mechanism`, so the
attacks package can attack the stored candidate vectors (fresh draws per call, as independent records get).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmarks.common.caches import cache_key
from benchmarks.common.options import quiet_seed_warnings
from textcrafter_rag.autofit import AutoFitConfig
from textcrafter_rag.mechanisms import Mechanism, NullspaceNoise
from textcrafter_rag.noise_fitting import fit_nullspace_for_encoder
from textcrafter_rag.sealed.candidates import noise_to_norm, random_directions
from textcrafter_rag.textcrafter import TextCrafter

__all__ = [
    "DIRECTION_MECHANISMS",
    "NATIVE_MECHANISMS",
    "CandidateMechanism",
    "candidate_vectors",
    "nullspace_basis",
    "unit_rows32",
]

#: Mechanisms whose direction is moved to a grid strength ``r``.
DIRECTION_MECHANISMS = ("gaussian", "textcrafter-eps1.0-dir", "textcrafter-eps2.5-dir", "nullspace")
#: Shipped policies used as released (strength = their own perturbation norm).
NATIVE_MECHANISMS = {"textcrafter-eps1.0": 1.0, "textcrafter-eps2.5": 2.5}
_CHUNK = 50_000


def unit_rows32(x: np.ndarray) -> np.ndarray:
    """``x`` with every row scaled to unit L2 norm, in float32 (the core's ``unit_rows`` is float64: too big here)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@functools.lru_cache(maxsize=4)
def _shipped(eps: float) -> TextCrafter:
    with quiet_seed_warnings():
        return TextCrafter.load_shipped(eps=eps, seed=0)


def _textcrafter(eps: float, seed: int) -> TextCrafter:
    """The shipped policy at ``eps`` with its noise seeded by ``seed`` (a fresh instance: same seed, same draws)."""
    with quiet_seed_warnings():
        return TextCrafter.load_shipped(eps=eps, seed=seed) if seed is not None else _shipped(eps)


def nullspace_basis(encoder: Any, *, cache: Path, seed: int) -> np.ndarray:
    """The PII subspace the nullspace mechanism removes, fitted once (auto-fit's corpus and sizes) and cached."""
    folder = cache / "two_stage" / "nullspace" / cache_key("nullspace-v1", encoder.model_id, seed)
    if not (folder / "config.json").is_file():
        fitted = fit_nullspace_for_encoder(encoder, calibration=AutoFitConfig().calibration, seed=seed, progress=False)
        fitted.save(folder)
    with quiet_seed_warnings():
        return NullspaceNoise.load(folder).basis.astype(np.float32)


def _direction_fn(mechanism: str, basis: np.ndarray | None) -> Callable[[np.ndarray, np.random.Generator, int], Any]:
    """``(x, rng, seed) -> (base, directions)``: the vector the noise is added to, and unit directions."""

    def gaussian(x: np.ndarray, rng: np.random.Generator, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return x, random_directions(len(x), x.shape[1], rng)

    def policy(eps: float) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
        def build(x: np.ndarray, rng: np.random.Generator, seed: int) -> tuple[np.ndarray, np.ndarray]:
            return x, unit_rows32(_textcrafter(eps, seed).protect(x) - x)

        return build

    def nullspace(x: np.ndarray, rng: np.random.Generator, seed: int) -> tuple[np.ndarray, np.ndarray]:
        if basis is None:
            raise ValueError("the nullspace mechanism needs its fitted basis")
        projected = unit_rows32(x - (x @ basis) @ basis.T) * np.linalg.norm(x, axis=1, keepdims=True)
        return projected, random_directions(len(x), x.shape[1], rng)

    table = {
        "gaussian": gaussian,
        "textcrafter-eps1.0-dir": policy(1.0),
        "textcrafter-eps2.5-dir": policy(2.5),
        "nullspace": nullspace,
    }
    if mechanism not in table:
        raise ValueError(f"unknown direction mechanism {mechanism!r}; choose from {sorted(table)}")
    return table[mechanism]


def candidate_vectors(
    x: np.ndarray,
    *,
    mechanism: str,
    strength: float | None,
    seed: int,
    basis: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """The candidate vectors of the rows of ``x`` and the mean perturbation norm ``||y - x||`` before rescaling.

    ``strength`` is the norm ``r`` for :data:`DIRECTION_MECHANISMS`; ``None`` for :data:`NATIVE_MECHANISMS`.
    ``seed`` seeds the draws (one stream per call: documents and queries pass different seeds).
    """
    x = np.asarray(x, dtype=np.float32)
    if mechanism in NATIVE_MECHANISMS:
        released = _textcrafter(NATIVE_MECHANISMS[mechanism], seed).protect(x)
        norm = float(np.linalg.norm(released - x, axis=1).mean())
        return unit_rows32(released) * np.linalg.norm(x, axis=1, keepdims=True), norm
    if strength is None:
        raise ValueError(f"{mechanism} needs a strength")
    rng = np.random.default_rng(seed)
    build = _direction_fn(mechanism, basis)
    out = np.empty_like(x)
    # the core computes in float64: chunks bound the memory of big (Gaussian) stores; a policy sees one batch,
    # as its seeded noise source restarts per call
    step = _CHUNK if mechanism == "gaussian" else max(len(x), 1)
    for i in range(0, len(x), step):
        base, dirs = build(x[i : i + step], rng, seed)
        out[i : i + step] = noise_to_norm(base, dirs, strength)
    return out, float(strength)


@dataclass(frozen=True)
class _Params:
    mechanism: str
    strength: float | None


class CandidateMechanism(Mechanism):
    """The candidate vectors of one mechanism and strength as a :class:`Mechanism` (for the attacks package).

    Every call draws fresh directions from the mechanism's own seeded stream, as independent records do
    (a keyed store derives each record's direction from a PRF; to an attacker it is the same distribution).
    """

    name: ClassVar[str] = "two-stage-candidate"

    def __init__(
        self, *, mechanism: str, strength: float | None, seed: int | None = 0, basis: np.ndarray | None = None
    ) -> None:
        super().__init__(seed=seed)
        self._p = _Params(mechanism=mechanism, strength=None if strength is None else float(strength))
        self._basis = basis
        self._rng = np.random.default_rng(seed)

    def _protect(self, x: np.ndarray) -> np.ndarray:
        with self._lock:
            draw = int(self._rng.integers(0, 2**31 - 1))
        return candidate_vectors(
            x, mechanism=self._p.mechanism, strength=self._p.strength, seed=draw, basis=self._basis
        )[0]

    def params(self) -> dict[str, Any]:
        return {"mechanism": self._p.mechanism, "strength": self._p.strength}

    def expected_norm(self, dim: int) -> float | None:
        return self._p.strength
