"""REINFORCE training of the TextCrafter policy, and Algorithm 1's per-batch refinement.

Each step samples ``delta ~ N(mu, sigma^2 I)``, releases ``f_adv = f0 + P_v,eps(delta)`` and scores
it with the reward. The score-function loss is ``-mean((R - b_t) * log pi(delta))`` with the EMA
baseline ``b_t = a*b_{t-1} + c*mean(R)``, ``b_0 = 0``.

``log pi`` depends on branch 1 (``mu``) and ``lambda`` only: the direction ``v`` enters the
release deterministically, so under the paper's loss alone branch 2 receives no gradient and
``v`` stays at its initialisation. With ``direction_gradient=True`` (default) the loss adds the
pathwise term ``-mean(R)`` differentiated through the projection with respect to ``v`` only
(``delta`` is a sampled constant there), which trains branch 2 on the same reward.

With an :class:`~.aware.AwareObjective` the reward becomes ``R - penalty`` (retrieval drop and
adversary gain, :mod:`.aware`) everywhere: in the REINFORCE and pathwise terms and in validation.
The adversary is retrained on the policy's own (eval-mode) releases before step 1 and every
``adversary_every`` steps; after each retraining the kept best state is re-scored against the new
adversary, so selection always compares policies under the same attacker, and the plateau count
restarts.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import InvalidInputError
from .aware import AwareObjective
from .configs import PolicyTrainingConfig
from .pii import PIIClassifier
from .policy import TextCrafterPolicy
from .priors import ClusterPrior
from .projection import release
from .reward import RewardWeights
from .rollout import rollout

__all__ = ["PolicyTrainingConfig", "TrainingReport", "train_policy"]


@dataclass
class TrainingReport:
    """What happened during training.

    With an aware reward whose adversary is retrained, ``initial_val_reward`` and ``best_val_reward``
    are both scored against the last adversary, so the two compare like with like.
    """

    steps_run: int
    best_step: int
    initial_val_reward: float
    best_val_reward: float
    seconds: float
    stopped_early: bool
    history: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("history")
        return d


def _objective(policy, f0, z, rows, aware: AwareObjective | None, **kw):
    """``rollout`` with the aware penalty subtracted from the reward (when there is one)."""
    r, logp, _, f_adv = rollout(policy, f0, z, **kw)
    parts: dict[str, torch.Tensor] = {}
    if aware is not None:
        parts = aware.penalty(f_adv, f0, rows)
        r = r - parts["total"]
    return r, logp, parts


@torch.no_grad()
def _validate(policy, f0, z, rows, aware, **kw) -> float:
    was_training = policy.training
    policy.eval()
    r = _objective(policy, f0, z, rows, aware, **kw)[0]
    policy.train(was_training)
    return float(r.mean())


@torch.no_grad()
def _retrain_adversary(policy, aware: AwareObjective, x_tr, rows_tr, eps: float) -> float:
    """Release up to ``adversary_samples`` training rows with the current policy and retrain on them."""
    was_training = policy.training
    policy.eval()
    pick = torch.randperm(x_tr.shape[0], generator=aware.generator)[: aware.config.adversary_samples]
    f0 = x_tr[pick]
    out = policy(f0)
    z = torch.randn(f0.shape, generator=aware.generator)
    f_adv = release(f0, out.mu + out.sigma * z, out.v, eps)
    policy.train(was_training)
    with torch.enable_grad():
        return aware.retrain(f_adv, rows_tr[pick])


def train_policy(
    policy: TextCrafterPolicy,
    embeddings: np.ndarray,
    *,
    eps: float,
    pii: PIIClassifier,
    prior: ClusterPrior,
    weights: RewardWeights,
    config: PolicyTrainingConfig,
    progress: bool = True,
    aware: AwareObjective | None = None,
) -> TrainingReport:
    """Train ``policy`` in place with REINFORCE and keep the best state by validation reward.

    Args:
        aware: Retrieval and adversary terms built on the same ``embeddings`` (rows aligned);
            ``None`` trains the paper's reward alone.
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    x = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
    n = x.shape[0]
    n_val = max(1, round(config.val_fraction * n))
    if n - n_val < 2:
        raise InvalidInputError(f"need more calibration embeddings than {n} to train")
    perm = torch.randperm(n, generator=gen)
    rows_val, rows_tr = perm[:n_val], perm[n_val:]
    x_val, x_tr = x[rows_val], x[rows_tr]
    z_val = torch.randn(x_val.shape, generator=gen)
    kw = {"eps": eps, "pii": pii, "prior": prior, "weights": weights}
    if aware is not None and aware.x.shape != x.shape:
        raise InvalidInputError(
            f"the aware objective holds {tuple(aware.x.shape)} embeddings, training has {tuple(x.shape)}"
        )
    val = {"f0": x_val, "z": z_val, "rows": rows_val, "aware": aware, **kw}
    recall = _retrain_adversary(policy, aware, x_tr, rows_tr, eps) if aware is not None and aware.due(0) else None

    opt = torch.optim.Adam(policy.parameters(), lr=config.lr)
    baseline = 0.0
    best = initial = _validate(policy, **val)
    best_state = initial_state = copy.deepcopy(policy.state_dict())
    best_step, stale, step = 0, 0, 0
    history: list[dict[str, float]] = []
    policy.train()
    bar = tqdm(range(1, config.steps + 1), desc="Training policy", disable=not progress)
    for step in bar:
        idx = torch.randint(0, x_tr.shape[0], (min(config.batch_size, x_tr.shape[0]),), generator=gen)
        f0 = x_tr[idx]
        z = torch.randn(f0.shape, generator=gen)
        r, logp, parts = _objective(policy, f0, z, rows_tr[idx], aware, **kw)
        r_det = r.detach()
        baseline = config.baseline_decay * baseline + config.baseline_gain * float(r_det.mean())
        loss = -((r_det - baseline) * logp).mean()
        if config.direction_gradient:
            loss = loss - r.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if aware is not None and aware.due(step) and step < config.steps:
            recall = _retrain_adversary(policy, aware, x_tr, rows_tr, eps)
            scored = copy.deepcopy(policy)
            scored.load_state_dict(best_state)
            best = _validate(scored, **val)  # the kept state, against the new adversary
            scored.load_state_dict(initial_state)
            initial = _validate(scored, **val)  # and the start, so the report compares like with like
            stale = 0  # a new attacker: give the policy time to respond before stopping
        if step % config.eval_every == 0 or step == config.steps:
            v_r = _validate(policy, **val)
            row = {
                "step": step,
                "train_reward": float(r_det.mean()),
                "val_reward": v_r,
                "baseline": baseline,
                "mean_sigma": float(policy.sigma().detach().mean()),
            }
            row.update({k: float(t.detach().mean()) for k, t in parts.items() if k != "total"})
            if recall is not None:
                row["adversary_recall_at_10"] = recall
            history.append(row)
            bar.set_postfix(val_reward=f"{v_r:.4f}", best=f"{max(best, v_r):.4f}")
            if v_r > best + config.min_improvement:
                best, best_step, stale = v_r, step, 0
                best_state = copy.deepcopy(policy.state_dict())
            else:
                stale += 1
                if stale >= config.patience:
                    break
    bar.close()
    policy.load_state_dict(best_state)
    policy.eval()
    return TrainingReport(
        steps_run=step,
        best_step=best_step,
        initial_val_reward=initial,
        best_val_reward=best,
        seconds=time.perf_counter() - t0,
        stopped_early=step < config.steps,
        history=history,
    )
