"""The TextCrafter reward ``r = -alpha*||f_adv - f0|| - beta*p_pii(f_adv) - gamma*||f_adv - f_mu||``.

Under the sphere projection ``||f_adv - f0|| = eps`` for every action, so the first term is
the constant ``-alpha*eps``: it shifts every reward equally and carries no learning signal
(the EMA baseline absorbs it). It is kept for fidelity to the paper and reported in logs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..errors import InvalidInputError
from .pii import PIIClassifier
from .priors import ClusterPrior

__all__ = ["RewardWeights", "reward"]


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


def reward(
    f_adv: torch.Tensor, f0: torch.Tensor, *, pii: PIIClassifier, prior: ClusterPrior, weights: RewardWeights
) -> torch.Tensor:
    """Per-row reward; differentiable in ``f_adv``."""
    f_mu = prior.target(f0)
    return (
        -weights.alpha * (f_adv - f0).norm(dim=-1)
        - weights.beta * pii.prob(f_adv)
        - weights.gamma * (f_adv - f_mu).norm(dim=-1)
    )
