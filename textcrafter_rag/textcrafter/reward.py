"""The TextCrafter reward ``r = -alpha*||f_adv - f0|| - beta*p_pii(f_adv) - gamma*||f_adv - f_mu||``.

Under the sphere projection ``||f_adv - f0|| = eps`` for every action, so the first term is
the constant ``-alpha*eps``: it shifts every reward equally and carries no learning signal
(the EMA baseline absorbs it). It is kept for fidelity to the paper and reported in logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .configs import RewardWeights
from .pii import PIIClassifier
from .priors import ClusterPrior

if TYPE_CHECKING:
    import torch

__all__ = ["RewardWeights", "reward"]


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
