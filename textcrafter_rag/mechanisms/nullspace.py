"""Sensitive-subspace removal: iterative nullspace projection (INLP), then isotropic Gaussian noise.

INLP (Ravfogel et al., ACL 2020) repeatedly trains a linear classifier for a protected attribute,
projects the embeddings onto the nullspace of its weights, and retrains on the projected data, until
a fresh classifier does no better than chance on held-out data. What remains is the orthonormal basis
``Q`` of the removed directions; the release is ``x' = x - Q Q^T x + s z`` with ``z ~ N(0, I)``,
optionally rescaled to the input's norm. The projection alone is deterministic and linear (an
attacker who knows ``Q`` loses exactly the removed coordinates, nothing else), so noise of strength
``s`` is what blurs the rest; ``s`` is the strength a benchmark bisects over.

The attribute is whatever integer labels the caller passes; the encoder convenience
:func:`textcrafter_rag.noise_fitting.fit_nullspace_for_encoder` uses the kinds of personal data a
sentence holds (see :func:`textcrafter_rag.noise_fitting.entity_kind_corpus` for why).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import ArtifactError, InvalidInputError, InvalidTypeError
from ..extras import require_extra
from ..numerics import row_norms
from ..validation import check_positive, check_vectors
from .base import Mechanism
from .fitted import load_fitted, save_fitted

__all__ = ["NullspaceNoise", "NullspaceConfig", "fit_nullspace_noise"]

_KIND = "nullspace-noise"


@dataclass(frozen=True)
class NullspaceConfig:
    """How :func:`fit_nullspace_noise` runs INLP, and the default noise.

    Args:
        s: The default strength: per-coordinate std of the isotropic noise (as in ``GaussianNoise``).
        renormalize: Rescale each release to its input's norm (keeps unit-norm stores unit-norm).
        max_directions: Stop once this many directions are removed.
        max_iterations: Remove directions in at most this many rounds (one more classifier fit then
            measures what is left).
        tolerance: Stop when held-out accuracy is at most chance (the majority share) plus this.
        test_fraction: Held-out share of the labelled embeddings (stratified).
        C: Inverse L2 regularisation of the logistic regressions (on embeddings rescaled to
            coordinates of order 1, so ``C`` means the same for every encoder).
        seed: Seed of the split and the classifiers.
    """

    s: float = 0.01
    renormalize: bool = True
    max_directions: int = 64
    max_iterations: int = 20
    tolerance: float = 0.01
    test_fraction: float = 0.25
    C: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive(self.s, name="s")
        check_positive(self.C, name="C")
        if self.max_directions < 1 or self.max_iterations < 1:
            raise InvalidInputError("max_directions and max_iterations must be >= 1")
        if not (0 <= self.tolerance < 1) or not (0 < self.test_fraction < 1):
            raise InvalidInputError("tolerance must lie in [0, 1) and test_fraction in (0, 1)")


class NullspaceNoise(Mechanism):
    """Remove a fitted subspace, add isotropic Gaussian noise: ``x' = x - Q Q^T x + s z``.

    Build one with :func:`fit_nullspace_noise` (from labelled embeddings), the encoder
    convenience :func:`textcrafter_rag.noise_fitting.fit_nullspace_for_encoder`, or :meth:`load`.

    Args:
        basis: Orthonormal columns ``Q`` (``(D, k)``, ``k >= 0``) spanning the removed directions.
        s: Per-coordinate noise std (> 0): the strength.
        renormalize: Rescale each release to the norm of its input.
        metadata: Per-iteration held-out accuracies, fingerprint and provenance (``config.json``).
        probes: The encoder's probe embeddings (fingerprint), if known.
        seed: Reproducible noise (warns). secure_mode: CSPRNG noise.
    """

    name: ClassVar[str] = "nullspace"

    def __init__(
        self,
        *,
        basis: np.ndarray,
        s: float,
        renormalize: bool = True,
        metadata: dict[str, Any] | None = None,
        probes: np.ndarray | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> None:
        q = np.asarray(basis, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] > q.shape[0] or q.shape[0] < 1 or not np.isfinite(q).all():
            raise InvalidInputError(f"basis must be a finite (D, k) matrix with k <= D, got shape {q.shape}")
        if not np.allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-6):
            raise InvalidInputError("basis must have orthonormal columns")
        self.s = check_positive(s, name="s")
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.basis = q
        self.renormalize = bool(renormalize)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.probes = probes
        self.path: Path | None = None
        self._q32 = q.astype(np.float32)

    @property
    def dim(self) -> int:
        return int(self.basis.shape[0])

    @property
    def removed(self) -> int:
        """How many directions are projected out."""
        return int(self.basis.shape[1])

    def project(self, x: Any) -> np.ndarray:
        """The deterministic part ``x - Q Q^T x`` (float32), for audits and probes."""
        x32 = check_vectors(x, dim=self.dim, allow_zero_rows=True)
        return x32 - (x32 @ self._q32) @ self._q32.T

    def with_strength(self, s: float, *, seed: int | None = None, secure_mode: bool | None = None) -> NullspaceNoise:
        """The same removed subspace with noise std ``s`` (larger = more noise); no refit, fresh noise source.

        ``secure_mode=None`` keeps this mechanism's: a CSPRNG mechanism never turns into a seeded one.
        """
        out = NullspaceNoise(
            basis=self.basis,
            s=s,
            renormalize=self.renormalize,
            metadata=self.metadata,
            probes=self.probes,
            seed=seed,
            secure_mode=self.secure_mode if secure_mode is None else secure_mode,
        )
        out.path = self.path
        return out

    def _protect(self, x: np.ndarray) -> np.ndarray:
        y = x - (x @ self._q32) @ self._q32.T + (self.s * self._noise.normal(x.shape)).astype(np.float32)
        if self.renormalize:
            after = row_norms(y)
            y = y * (row_norms(x) / np.where(after > 0, after, 1.0))[:, None].astype(np.float32)
        return y

    def params(self) -> dict[str, Any]:
        return {"s": self.s}

    def spec(self) -> str:
        return f"nullspace:{self.path},s={self.s!r}" if self.path else f"nullspace:s={self.s!r}"

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save as ``config.json`` + ``model.safetensors`` (float64 basis, probes); loading is bit-exact."""
        config = {**self.metadata, "s": self.s, "renormalize": self.renormalize, "dim": self.dim}
        config["removed"] = self.removed
        self.path = save_fitted(
            path, kind=_KIND, arrays={"nullspace.basis": self.basis}, config=config, probes=self.probes
        )
        return self.path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Any = None,
        s: float | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> NullspaceNoise:
        """Load a saved mechanism, at its saved noise std unless ``s`` is given.

        Raises:
            ArtifactError: Missing, corrupted, edited or unknown-format files.
            FingerprintMismatch: ``encoder`` differs from the one it was fitted for.
        """
        if s is not None:
            check_positive(s, name="s")
        config, arrays, probes = load_fitted(path, kind=_KIND, encoder=encoder)
        meta = {k: v for k, v in config.items() if k not in {"s", "renormalize", "dim", "removed"}}
        try:
            basis = arrays["nullspace.basis"]
            if basis.shape[0] != config["dim"]:
                raise InvalidInputError(f"basis dimension {basis.shape[0]} != recorded dimension {config['dim']}")
            out = cls(
                basis=basis,
                s=config["s"] if s is None else s,
                renormalize=bool(config.get("renormalize", True)),
                metadata=meta,
                probes=probes,
                seed=seed,
                secure_mode=secure_mode,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{path} holds an invalid nullspace-noise mechanism: {exc}") from None
        out.path = Path(path)
        return out


def _classifier(cfg: NullspaceConfig) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=cfg.C, max_iter=2000, random_state=cfg.seed)


def _orthonormal_extension(basis: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``basis`` extended by the part of the rows of ``weights`` orthogonal to it (Gram-Schmidt twice via QR)."""
    w = weights.T.astype(np.float64)
    for _ in range(2):  # re-orthogonalise: one pass loses orthogonality in floating point
        w = w - basis @ (basis.T @ w)
    u, sv, _ = np.linalg.svd(w, full_matrices=False)
    keep = sv > max(sv.max(initial=0.0) * 1e-8, 1e-12)
    return np.concatenate([basis, u[:, keep]], axis=1)


def fit_nullspace_noise(
    embeddings: Any,
    labels: Any,
    *,
    config: NullspaceConfig | None = None,
    metadata: dict[str, Any] | None = None,
    probes: np.ndarray | None = None,
) -> NullspaceNoise:
    """Run INLP on labelled embeddings and return the mechanism; ``metadata['inlp']`` records every round.

    Each round fits a logistic regression on the training split projected so far, records its
    held-out accuracy, and stops when that is within ``tolerance`` of chance or a limit is reached;
    otherwise it removes the rowspace of the weights (1 direction for two classes, up to ``K`` for
    ``K``). The last recorded accuracy is therefore always that of a fresh probe after all removals.

    Args:
        embeddings: ``(n, D)`` float embeddings.
        labels: ``(n,)`` integer class labels (at least two classes, each with at least two rows).
        config: INLP limits and the default noise; default :class:`NullspaceConfig`.
        metadata: Stored in ``config.json`` (encoder fingerprint, label names, provenance).
        probes: The encoder's probe embeddings, for the fingerprint check on load.

    Raises:
        TypeError, ValueError: Invalid embeddings or labels.
    """
    cfg = config or NullspaceConfig()
    x = check_vectors(embeddings, name="embeddings").astype(np.float64)
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise InvalidInputError(f"labels must be 1-D with one label per embedding ({x.shape[0]}), got shape {y.shape}")
    if y.dtype.kind not in "iu":
        raise InvalidTypeError(f"labels must be integers, got dtype {y.dtype}")
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2 or counts.min() < 2:
        raise InvalidInputError("labels need at least two classes with at least two embeddings each")
    require_extra("fit", purpose="fitting a nullspace-noise mechanism (scikit-learn)")
    from sklearn.model_selection import train_test_split

    x = x * (np.sqrt(x.shape[1]) / np.median(row_norms(x)))  # coordinates of order 1: C is encoder-independent
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=cfg.test_fraction, random_state=cfg.seed, stratify=y)
    chance = float(np.bincount(np.searchsorted(classes, y_te)).max() / y_te.size)
    basis = np.zeros((x.shape[1], 0))
    rounds: list[dict[str, Any]] = []
    for it in range(cfg.max_iterations + 1):
        clf = _classifier(cfg).fit(x_tr - (x_tr @ basis) @ basis.T, y_tr)
        acc = float(clf.score(x_te - (x_te @ basis) @ basis.T, y_te))
        rounds.append({"round": it, "removed_before": int(basis.shape[1]), "held_out_accuracy": acc})
        if acc <= chance + cfg.tolerance or it == cfg.max_iterations or basis.shape[1] >= cfg.max_directions:
            break
        basis = _orthonormal_extension(basis, clf.coef_)[:, : cfg.max_directions]
    meta = {
        **(metadata or {}),
        "inlp": {
            "rounds": rounds,
            "chance": chance,
            "classes": int(classes.size),
            "n": int(x.shape[0]),
            "config": {k: v for k, v in asdict(cfg).items() if k not in {"s", "renormalize"}},
        },
    }
    return NullspaceNoise(basis=basis, s=cfg.s, renormalize=cfg.renormalize, metadata=meta, probes=probes)
