r"""Spectrum-shaped Gaussian noise: the covariance that minimises a Gaussian leakage bound at fixed retrieval damage.

Model. Let ``M = E[x x^T] = U diag(lambda) U^T`` be the second-moment matrix of document
embeddings and ``q_i = E[(u_i . y)^2]`` the second moment of queries ``y`` along eigenvector
``u_i``. The release is ``x' = x + U (s * z)``, ``z ~ N(0, I)``. Treating the coordinate
``u_i . x`` as Gaussian with variance ``lambda_i``, the mutual information between ``x`` and
``x'`` is at most ``L(s) = sum_i 1/2 log(1 + lambda_i / s_i^2)`` (independent Gaussian channels).
The noise changes every query's score by ``<y, U(s * z)>``, whose variance averaged over
queries is ``sum_i q_i s_i^2``: the retrieval damage. We fix it to the budget ``B``.

Solution (water-filling). With ``v_i = s_i^2``, ``L`` is convex in ``v`` (each term has second
derivative ``1/2 (1/v^2 - 1/(v + lambda)^2) > 0``) and the constraint is linear, so the KKT point
is the global minimum. Stationarity of ``L + mu (sum_i q_i v_i - B)`` gives
``lambda_i / (2 v_i (v_i + lambda_i)) = mu q_i``, i.e. with ``t = 1 / mu``::

    v_i(t) = (sqrt(lambda_i^2 + 2 t lambda_i / q_i) - lambda_i) / 2
           = (t lambda_i / q_i) / (sqrt(lambda_i^2 + 2 t lambda_i / q_i) + lambda_i)   (no cancellation)

Each ``v_i(t)`` increases from 0 to infinity with ``t``, so ``sum_i q_i v_i(t) = B`` has one root,
found by a 1-D root search on ``log t`` (bracketed: ``v_i(t) <= t / (2 q_i)``). Directions the
documents do not use (``lambda_i = 0``) get no noise: they carry nothing to leak. Directions the
queries do not use (``q_i -> 0``) would get unbounded noise for free; ``q_floor`` caps that.

For unit-norm embeddings, isotropic Gaussian noise of std ``s`` has damage ``B = s^2``, so budgets
compare directly with :class:`~textcrafter_rag.mechanisms.GaussianNoise` at ``s = sqrt(B)``.
No formal privacy guarantee: the bound assumes Gaussian embeddings.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import ArtifactError, InvalidInputError
from ..validation import check_positive, check_vectors
from .base import Mechanism
from .fitted import load_fitted, save_fitted
from .special import brentq

__all__ = ["SpectralNoise", "SpectralConfig", "fit_spectral_noise", "water_fill"]

_KIND = "spectral-noise"


def water_fill(eigenvalues: np.ndarray, query_moments: np.ndarray, budget: float) -> np.ndarray:
    """Noise variances ``s_i^2`` minimising ``sum_i 1/2 log(1 + lambda_i / s_i^2)`` s.t. ``sum_i q_i s_i^2 = budget``.

    Args:
        eigenvalues: ``lambda_i >= 0`` (document second moments along each direction).
        query_moments: ``q_i > 0`` (query second moments along the same directions).
        budget: The retrieval damage ``B > 0``.

    Returns:
        The float64 variances ``v_i``; zero where ``lambda_i = 0``.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    q = np.asarray(query_moments, dtype=np.float64)
    budget = check_positive(budget, name="budget")
    if lam.ndim != 1 or lam.shape != q.shape or not (np.isfinite(lam).all() and np.isfinite(q).all()):
        raise InvalidInputError("eigenvalues and query_moments must be finite 1-D arrays of the same length")
    if (lam < 0).any() or (q <= 0).any():
        raise InvalidInputError("eigenvalues must be >= 0 and query_moments > 0")
    active = lam > 0
    if not active.any():
        raise InvalidInputError("all eigenvalues are zero: there is no signal to shape noise for")
    la, qa = lam[active], q[active]

    def variances(t: float) -> np.ndarray:
        a = t * la / qa
        return a / (np.sqrt(la * la + 2.0 * a) + la)

    def gap(log_t: float) -> float:
        return math.log(float(np.sum(qa * variances(math.exp(log_t))))) - math.log(budget)

    lo = math.log(2.0 * budget / la.size) - 1.0  # v_i(t) <= t / (2 q_i): the damage there is < budget
    hi = lo + 1.0
    while gap(hi) < 0:
        hi += 2.0 * (hi - lo)
    log_t = brentq(gap, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    out = np.zeros_like(lam)
    out[active] = variances(math.exp(log_t))
    return out


@dataclass(frozen=True)
class SpectralConfig:
    """How :func:`fit_spectral_noise` fits the spectrum.

    Args:
        budget: The default strength: retrieval damage ``sum_i q_i s_i^2`` (the query-averaged
            variance of a score). :meth:`SpectralNoise.with_strength` changes it without refitting.
        q_floor: Query moments below ``q_floor * max(q)`` are raised to it, which caps the noise in
            directions the calibration queries never use (it would otherwise be unbounded).
    """

    budget: float = 0.01
    q_floor: float = 1e-4

    def __post_init__(self) -> None:
        check_positive(self.budget, name="budget")
        if not (0 < self.q_floor < 1):
            raise InvalidInputError(f"q_floor must lie in (0, 1), got {self.q_floor!r}")


class SpectralNoise(Mechanism):
    """Gaussian noise ``x + U (s * z)`` with per-direction std ``s`` from :func:`water_fill`.

    Build one with :func:`fit_spectral_noise` (from embeddings), the encoder convenience
    :func:`textcrafter_rag.noise_fitting.fit_spectral_for_encoder`, or :meth:`load`. The spectrum is
    fitted once; :meth:`with_strength` re-solves only the 1-D water-filling for another budget.

    Args:
        eigenvalues: Document second moments ``lambda_i`` (``(D,)``, >= 0), in the order of ``eigenvectors``.
        eigenvectors: Orthonormal columns ``U`` (``(D, D)``).
        query_moments: Query second moments ``q_i`` along the columns (``(D,)``, > 0).
        budget: Retrieval damage ``B`` (> 0): the strength.
        metadata: Fingerprint and provenance, stored in ``config.json``.
        probes: The encoder's probe embeddings (fingerprint), if known.
        seed: Reproducible noise (warns). secure_mode: CSPRNG noise.
    """

    name: ClassVar[str] = "spectral"

    def __init__(
        self,
        *,
        eigenvalues: np.ndarray,
        eigenvectors: np.ndarray,
        query_moments: np.ndarray,
        budget: float,
        metadata: dict[str, Any] | None = None,
        probes: np.ndarray | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> None:
        lam = np.asarray(eigenvalues, dtype=np.float64)
        u = np.asarray(eigenvectors, dtype=np.float64)
        if u.ndim != 2 or u.shape != (lam.size, lam.size) or not np.isfinite(u).all():
            raise InvalidInputError(f"eigenvectors must be a finite ({lam.size}, {lam.size}) matrix")
        if not np.allclose(u.T @ u, np.eye(lam.size), atol=1e-6):
            raise InvalidInputError("eigenvectors must have orthonormal columns")
        self.budget = check_positive(budget, name="budget")
        self.variances = water_fill(lam, query_moments, self.budget)
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.eigenvalues, self.eigenvectors = lam, u
        self.query_moments = np.asarray(query_moments, dtype=np.float64)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.probes = probes
        self.path: Path | None = None
        self._factor = (u * np.sqrt(self.variances)).T.astype(np.float32)  # rows: s_i u_i

    @property
    def dim(self) -> int:
        return int(self.eigenvalues.size)

    @property
    def noise_std(self) -> np.ndarray:
        """The per-direction standard deviations ``s_i`` (float64, in the order of the eigenvectors)."""
        return np.sqrt(self.variances)

    def covariance(self) -> np.ndarray:
        """The noise covariance ``U diag(s^2) U^T`` (float64, ``(D, D)``)."""
        return (self.eigenvectors * self.variances) @ self.eigenvectors.T

    def leakage_bound(self) -> float:
        """The Gaussian leakage bound ``sum_i 1/2 log(1 + lambda_i / s_i^2)`` in nats (over directions with signal)."""
        m = self.eigenvalues > 0
        return float(0.5 * np.sum(np.log1p(self.eigenvalues[m] / self.variances[m])))

    def with_strength(
        self, budget: float, *, seed: int | None = None, secure_mode: bool | None = None
    ) -> SpectralNoise:
        """The same fitted spectrum at another budget (larger = more noise); no refit, fresh noise source.

        ``secure_mode=None`` keeps this mechanism's: a CSPRNG mechanism never turns into a seeded one.
        """
        out = SpectralNoise(
            eigenvalues=self.eigenvalues,
            eigenvectors=self.eigenvectors,
            query_moments=self.query_moments,
            budget=budget,
            metadata=self.metadata,
            probes=self.probes,
            seed=seed,
            secure_mode=self.secure_mode if secure_mode is None else secure_mode,
        )
        out.path = self.path
        return out

    def _protect(self, x: np.ndarray) -> np.ndarray:
        z = self._noise.normal(x.shape).astype(np.float32)
        return x + z @ self._factor

    def params(self) -> dict[str, Any]:
        return {"budget": self.budget}

    def spec(self) -> str:
        return f"spectral:{self.path},budget={self.budget!r}" if self.path else f"spectral:budget={self.budget!r}"

    def expected_norm(self, dim: int) -> float:
        """The RMS noise norm ``sqrt(sum_i s_i^2)``: an upper bound on ``E||x' - x||``, and close to it."""
        return float(math.sqrt(self.variances.sum()))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save as ``config.json`` + ``model.safetensors`` (float64 spectrum, probes); loading is bit-exact."""
        config = {
            **self.metadata,
            "budget": self.budget,
            "dim": self.dim,
            "leakage_bound_nats": self.leakage_bound(),
        }
        arrays = {
            "spectral.eigenvalues": self.eigenvalues,
            "spectral.eigenvectors": self.eigenvectors,
            "spectral.query_moments": self.query_moments,
        }
        self.path = save_fitted(path, kind=_KIND, arrays=arrays, config=config, probes=self.probes)
        return self.path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Any = None,
        budget: float | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> SpectralNoise:
        """Load a saved mechanism, at its saved budget unless ``budget`` is given.

        Raises:
            ArtifactError: Missing, corrupted, edited or unknown-format files.
            FingerprintMismatch: ``encoder`` differs from the one it was fitted for.
        """
        config, arrays, probes = load_fitted(path, kind=_KIND, encoder=encoder)
        meta = {k: v for k, v in config.items() if k not in {"budget", "dim", "leakage_bound_nats"}}
        try:
            out = cls(
                eigenvalues=arrays["spectral.eigenvalues"],
                eigenvectors=arrays["spectral.eigenvectors"],
                query_moments=arrays["spectral.query_moments"],
                budget=config["budget"] if budget is None else budget,
                metadata=meta,
                probes=probes,
                seed=seed,
                secure_mode=secure_mode,
            )
        except KeyError as exc:
            raise ArtifactError(f"{path} holds an invalid spectral-noise mechanism: missing {exc}") from None
        except ValueError as exc:
            if budget is not None and "budget" in str(exc):
                raise
            raise ArtifactError(f"{path} holds an invalid spectral-noise mechanism: {exc}") from None
        out.path = Path(path)
        return out


def fit_spectral_noise(
    documents: Any,
    *,
    queries: Any = None,
    config: SpectralConfig | None = None,
    metadata: dict[str, Any] | None = None,
    probes: np.ndarray | None = None,
) -> SpectralNoise:
    """Fit the spectrum from calibration embeddings (unlabelled).

    Args:
        documents: Calibration document embeddings ``(n, D)``; their second-moment matrix gives ``U, lambda``.
        queries: Calibration query embeddings ``(m, D)``; ``None`` uses ``documents`` (queries and
            documents from the same encoder share most of their spectrum).
        config: Budget and ``q_floor``; default :class:`SpectralConfig`.
        metadata: Stored in ``config.json`` (encoder fingerprint, provenance).
        probes: The encoder's probe embeddings, for the fingerprint check on load.

    Raises:
        TypeError, ValueError: Invalid embeddings (see :func:`~textcrafter_rag.validation.check_vectors`).
    """
    cfg = config or SpectralConfig()
    docs = check_vectors(documents, name="documents").astype(np.float64)
    qs = docs if queries is None else check_vectors(queries, dim=docs.shape[1], name="queries").astype(np.float64)
    lam, u = np.linalg.eigh(docs.T @ docs / docs.shape[0])
    lam, u = np.clip(lam[::-1], 0.0, None), np.ascontiguousarray(u[:, ::-1])  # largest first
    lam[lam < lam[0] * 1e-12] = 0.0  # numerical noise of a rank-deficient sample carries no signal
    q = np.sum((qs @ u) ** 2, axis=0) / qs.shape[0]
    q = np.maximum(q, cfg.q_floor * q.max())
    meta = {
        **(metadata or {}),
        "n_documents": int(docs.shape[0]),
        "n_queries": None if queries is None else int(qs.shape[0]),
        "q_floor": cfg.q_floor,
    }
    return SpectralNoise(
        eigenvalues=lam, eigenvectors=u, query_moments=q, budget=cfg.budget, metadata=meta, probes=probes
    )
