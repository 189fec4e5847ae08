"""Local differential privacy mechanisms on the unit sphere.

Both mechanisms first normalise each embedding to unit L2 norm, so two inputs differ
by at most 2 in L2 (Gaussian) or by at most pi in great-circle distance (Purkayastha).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidInputError
from ..numerics import unit_rows
from ..validation import check_positive
from .base import Mechanism
from .special import brentq, log_ndtr, logsumexp, ndtr

__all__ = ["LDPGaussian", "Purkayastha", "analytic_gaussian_sigma", "gaussian_delta", "classical_gaussian_sigma"]


def gaussian_delta(*, epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact delta of the Gaussian mechanism at ``epsilon`` (Balle & Wang 2018, Thm. 8).

    ``delta = Phi(D/(2s) - e s/D) - exp(e) Phi(-D/(2s) - e s/D)`` with D the L2 sensitivity.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest sigma for which the Gaussian mechanism is ``(epsilon, delta)``-DP.

    Calibrated by the analytic Gaussian mechanism (Balle & Wang 2018), valid for any
    ``epsilon > 0``, unlike the classical bound which needs ``epsilon < 1``.
    """
    epsilon = check_positive(epsilon, name="epsilon")
    sensitivity = check_positive(sensitivity, name="sensitivity")
    if not (0 < delta < 1):
        raise InvalidInputError(f"delta must lie in (0, 1), got {delta!r}")

    def excess(log_sigma: float) -> float:
        return gaussian_delta(epsilon=epsilon, sigma=math.exp(log_sigma), sensitivity=sensitivity) - delta

    lo, hi = math.log(sensitivity) - 20.0, math.log(sensitivity) + 20.0
    log_sigma = brentq(excess, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    sigma = math.exp(log_sigma)
    # Round up to the safe side of the root.
    while gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity) > delta:
        sigma *= 1.0 + 1e-12
    return sigma


def classical_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The classical calibration ``sqrt(2 ln(1.25/delta)) * D / epsilon`` (Dwork & Roth, valid for epsilon < 1)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


class LDPGaussian(Mechanism):
    """The ``(epsilon, delta)``-LDP Gaussian mechanism on unit-sphere embeddings.

    Each row is normalised to unit norm (L2 sensitivity 2) and released as
    ``x/||x|| + N(0, sigma^2 I)`` with sigma from the analytic Gaussian mechanism.

    Args:
        epsilon: Privacy budget (> 0).
        delta: Failure probability, default ``1e-5``.
    """

    name: ClassVar[str] = "ldp"
    sensitivity: ClassVar[float] = 2.0

    def __init__(
        self, *, epsilon: float, delta: float = 1e-5, seed: int | None = None, secure_mode: bool = False
    ) -> None:
        self.sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=self.sensitivity)
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.epsilon = float(epsilon)
        self.delta = float(delta)

    def _protect(self, x: np.ndarray) -> np.ndarray:
        return (unit_rows(x) + self.sigma * self._noise.normal(x.shape)).astype(np.float32)

    def params(self) -> dict[str, Any]:
        return {"eps": self.epsilon, "delta": self.delta}

    def expected_norm(self, dim: int) -> float:
        return self.sigma * math.sqrt(2.0) * math.exp(math.lgamma((dim + 1) / 2) - math.lgamma(dim / 2))


class Purkayastha(Mechanism):
    """The Purkayastha mechanism (Du et al. 2023): ``epsilon``-LDP directions on the sphere.

    Releases a unit vector ``y`` with density proportional to ``exp(-kappa * angle(x, y))``
    and ``kappa = epsilon / pi``: two inputs change the log-density by at most
    ``kappa * pi = epsilon`` since the angle lies in ``[0, pi]``. Sampling: draw the angle
    ``theta`` from its marginal ``exp(-kappa t) sin(t)^(D-2)`` by inverse CDF on a fine grid,
    then rotate ``x`` by ``theta`` toward a uniformly random direction orthogonal to it.

    Args:
        epsilon: Privacy budget (> 0).
        grid: Points of the inverse-CDF grid on ``[0, pi]``.
    """

    name: ClassVar[str] = "purkayastha"
    deterministic_norm: ClassVar[bool] = True

    def __init__(
        self, *, epsilon: float, grid: int = 20001, seed: int | None = None, secure_mode: bool = False
    ) -> None:
        epsilon = check_positive(epsilon, name="epsilon")
        if grid < 101:
            raise InvalidInputError("grid must have at least 101 points")
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.epsilon = float(epsilon)
        self.kappa = self.epsilon / math.pi
        self._grid = int(grid)
        self._cdfs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def angle_cdf(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """The grid ``t`` on ``[0, pi]`` and the CDF of the released angle in dimension ``dim``."""
        with self._lock:
            if dim not in self._cdfs:
                t = np.linspace(0.0, math.pi, self._grid)
                with np.errstate(divide="ignore"):
                    logp = -self.kappa * t + (dim - 2) * np.log(np.sin(t))
                if dim == 2:
                    logp = -self.kappa * t
                logp = np.where(np.isfinite(logp), logp, -np.inf)
                # Trapezoid masses per cell, in log space.
                cell = np.logaddexp(logp[:-1], logp[1:]) - math.log(2.0)
                cdf = np.concatenate([[0.0], np.exp(np.logaddexp.accumulate(cell) - logsumexp(cell))])
                cdf[-1] = 1.0
                self._cdfs[dim] = (t, cdf)
            return self._cdfs[dim]

    def _protect(self, x: np.ndarray) -> np.ndarray:
        n, d = x.shape
        if d < 2:
            raise InvalidInputError("Purkayastha needs dimension >= 2")
        u = unit_rows(x)
        t, cdf = self.angle_cdf(d)
        theta = np.interp(self._noise.uniform((n,)), cdf, t)
        w = self._noise.normal((n, d))
        w -= np.sum(w * u, axis=1, keepdims=True) * u
        w -= np.sum(w * u, axis=1, keepdims=True) * u  # second pass for accuracy
        w = unit_rows(w)
        y = np.cos(theta)[:, None] * u + np.sin(theta)[:, None] * w
        return unit_rows(y).astype(np.float32)

    def params(self) -> dict[str, Any]:
        return {"eps": self.epsilon}

    def expected_norm(self, dim: int) -> float:
        t, cdf = self.angle_cdf(dim)
        chord = 2.0 * np.sin(t / 2.0)
        return float(np.sum(np.diff(cdf) * 0.5 * (chord[:-1] + chord[1:])))
