"""One policy rollout (sample, release, score), shared by training and Algorithm 1's refinement.

Inference-time refinement (:func:`refine_batch`) lives here rather than in :mod:`.training` so
that protecting vectors never imports the training loop.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from .pii import PIIClassifier
from .policy import PolicyOutput, TextCrafterPolicy
from .priors import ClusterPrior
from .projection import release
from .reward import RewardWeights, reward

__all__ = ["rollout", "refine_batch"]


def rollout(
    policy: TextCrafterPolicy,
    f0: torch.Tensor,
    z: torch.Tensor,
    *,
    eps: float,
    pii: PIIClassifier,
    prior: ClusterPrior,
    weights: RewardWeights,
) -> tuple[torch.Tensor, torch.Tensor, PolicyOutput, torch.Tensor]:
    """Sample ``delta = mu + sigma*z``, release it and score it.

    Returns:
        ``(reward, log_prob, policy_output, f_adv)``; ``reward`` is differentiable in ``v``
        (the pathwise term), ``log_prob`` in ``mu`` and ``lambda``.
    """
    out = policy(f0)
    delta = (out.mu + out.sigma * z).detach()
    f_adv = release(f0, delta, out.v, eps)
    r = reward(f_adv, f0, pii=pii, prior=prior, weights=weights)
    return r, TextCrafterPolicy.log_prob(delta, out), out, f_adv


def refine_batch(
    policy: TextCrafterPolicy,
    f0: torch.Tensor,
    noise: Any,
    *,
    eps: float,
    pii: PIIClassifier,
    prior: ClusterPrior,
    weights: RewardWeights,
    steps: int,
    lr: float = 1e-3,
) -> torch.Tensor:
    """Algorithm 1: a few policy-gradient steps on the batch being protected.

    A copy of the policy is fine-tuned on ``f0`` for ``steps`` steps; every sampled release is a
    candidate and each row keeps its highest-reward candidate. Each candidate satisfies the norm
    and orthogonality guarantees for its own direction ``v``. The shipped policy is not modified.

    Args:
        noise: A :class:`~textcrafter_rag.randomness.NoiseSource` for the action noise.
    """
    local = copy.deepcopy(policy)
    local.train()
    opt = torch.optim.Adam(local.parameters(), lr=lr)
    kw = {"eps": eps, "pii": pii, "prior": prior, "weights": weights}
    best_r = torch.full((f0.shape[0],), -math.inf)
    best = f0.clone()
    baseline = 0.0
    for _ in range(max(1, steps)):
        z = torch.as_tensor(noise.normal(tuple(f0.shape)), dtype=f0.dtype)
        r, logp, _, f_adv = rollout(local, f0, z, **kw)
        r_det = r.detach()
        better = r_det > best_r
        best = torch.where(better[:, None], f_adv.detach(), best)
        best_r = torch.where(better, r_det, best_r)
        baseline = 0.9 * baseline + 0.1 * float(r_det.mean())
        loss = -((r_det - baseline) * logp).mean() - r.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return best
