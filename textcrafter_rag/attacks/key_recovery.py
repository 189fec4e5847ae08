"""How much of a secret key an attack of :mod:`.keys` recovered: an estimate scored against the true key."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ..numerics import row_cosines
from ..validation import check_vectors
from .keys import _as_matrix, unkey

__all__ = ["KeyRecovery", "recovery_report"]


@dataclass(frozen=True)
class KeyRecovery:
    """How much of a key an attack recovered (:func:`recovery_report`).

    Attributes:
        mean_cosine: Mean cosine between the un-keyed estimates and the clean vectors (1: the key
            is as good as known; an inverter sees clean embeddings).
        centered_cosine: The same after subtracting the clean sample's mean from both, so the shared
            mean direction (which alone gives embeddings a positive cosine) is not counted.
        relative_frobenius: ``||T_hat - T||_F / ||T||_F`` (0 exact, about 1.41 for an unrelated rotation).
        permutation_recovered: Fraction of coordinates mapped correctly, when the key is a permutation.
    """

    mean_cosine: float
    centered_cosine: float
    relative_frobenius: float
    permutation_recovered: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        """Plain dict for JSON and tables."""
        return asdict(self)


def recovery_report(true_transform: Any, estimate: Any, clean_sample: Any) -> KeyRecovery:
    """Score an estimated key against the true one on a sample of clean vectors.

    Args:
        true_transform: The secret ``T`` (``(D, D)``, or a permutation as a 1-D array).
        estimate: The attack's ``T_hat``, in the same forms.
        clean_sample: ``(n, D)`` clean vectors; their releases ``clean @ T.T`` are un-keyed with
            ``T_hat`` and compared with them (noise-free, so this measures the key alone).
    """
    c = check_vectors(clean_sample, name="clean_sample").astype(np.float64)
    t, t_hat = _as_matrix(true_transform, c.shape[1]), _as_matrix(estimate, c.shape[1])
    est = np.asarray(unkey(c @ t.T, t_hat), dtype=np.float64)
    mu = c.mean(axis=0)
    centered = c - mu
    keep = np.linalg.norm(centered, axis=1) > 0
    recovered = None
    if np.isin(t, (0.0, 1.0)).all() and (t.sum(axis=0) == 1).all() and (t.sum(axis=1) == 1).all():
        rows, cols = linear_sum_assignment(-t_hat)
        recovered = float(np.mean(cols[np.argsort(rows)] == np.argmax(t, axis=1)))
    return KeyRecovery(
        mean_cosine=float(np.mean(row_cosines(est, c))),
        centered_cosine=float(np.mean(row_cosines(est[keep] - mu, centered[keep]))) if keep.any() else 0.0,
        relative_frobenius=float(np.linalg.norm(t_hat - t) / np.linalg.norm(t)),
        permutation_recovered=recovered,
    )
