"""Utility- and attack-aware reward terms for training TextCrafter (opt-in; the paper's reward is unchanged).

The paper's reward has no retrieval term, and its centroid pull moves every release toward a
cluster centre, which destroys retrieval at larger ``eps``; it also never asks whether an
attacker can read the release. Two extra terms, each weighted and off by default:

* **retrieval** (weight ``retrieval_weight``): each calibration document's clean nearest
  neighbours among the calibration documents stand in for the queries that should find it. The
  term is the mean drop ``cos(x, q) - cos(x', q)`` over those neighbours ``q``: zero for the
  identity release, positive when the release moves away from its neighbours.
* **adversary** (weight ``adversary_weight``): a bag-of-content-words decoder (embedding to a
  multi-hot vector over the calibration texts' most frequent content words) is retrained on the
  policy's own releases every ``adversary_every`` steps. The term is its information gain on the
  true words, ``mean_w [log p(w | x') - log p(w)]`` (nats per word over the base rate), clipped
  at 0 per row, so the policy is penalised for whatever the current attacker reads from its
  releases but gains nothing by steering a frozen decoder below the base rate (fooling a fixed
  attacker is not privacy; the next retraining would undo it).

Both terms are differentiable in the release, so they train branch 2 through the pathwise term
as well as branches 1 and ``lambda`` through REINFORCE. The sigma floor and ``max_snr`` cap of
:class:`~.policy.PolicyConfig` stay in force. Training uses these terms; inference never does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InvalidInputError
from ..metrics import content_tokens
from .configs import AwareRewardConfig

__all__ = [
    "AwareRewardConfig",
    "neighbour_indices",
    "retrieval_drop",
    "content_vocabulary",
    "BagOfWordsAdversary",
    "AwareObjective",
]


def neighbour_indices(x: torch.Tensor, k: int, *, chunk: int = 1024) -> torch.Tensor:
    """``(n, k)`` indices of each row's ``k`` most cosine-similar other rows (itself excluded)."""
    n = x.shape[0]
    if n < 2:
        raise InvalidInputError("need at least 2 calibration embeddings for neighbours")
    k = min(k, n - 1)
    u = F.normalize(x.float(), dim=-1)
    out = []
    for s in range(0, n, chunk):
        sims = u[s : s + chunk] @ u.T
        rows = torch.arange(s, min(s + chunk, n))
        sims[torch.arange(rows.numel()), rows] = -math.inf
        out.append(sims.topk(k, dim=-1).indices)
    return torch.cat(out)


def retrieval_drop(f_adv: torch.Tensor, f0: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Per-row mean of ``cos(f0, q) - cos(f_adv, q)`` over the queries ``(n, k, D)``; differentiable in ``f_adv``."""
    q = F.normalize(queries, dim=-1)
    clean = torch.einsum("nd,nkd->nk", F.normalize(f0, dim=-1), q)
    released = torch.einsum("nd,nkd->nk", F.normalize(f_adv, dim=-1), q)
    return (clean - released).mean(-1)


def content_vocabulary(texts: Sequence[str], size: int) -> tuple[list[str], np.ndarray]:
    """The ``size`` most frequent content words (ties alphabetical) and the ``(n, V)`` multi-hot targets."""
    tokens = [set(content_tokens(t)) for t in texts]
    counts = Counter(w for ws in tokens for w in ws)
    vocab = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
    index = {w: i for i, w in enumerate(vocab)}
    y = np.zeros((len(texts), len(vocab)), dtype=np.float32)
    for r, ws in enumerate(tokens):
        for w in ws:
            if w in index:
                y[r, index[w]] = 1.0
    return vocab, y


class BagOfWordsAdversary(nn.Module):
    """A fast inversion proxy: embedding to per-word logits over a content vocabulary."""

    def __init__(self, dim: int, vocab_size: int, *, hidden: int = 256, base_rate: torch.Tensor | None = None) -> None:
        super().__init__()
        if hidden:
            self.net: nn.Module = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, vocab_size))
        else:
            self.net = nn.Linear(dim, vocab_size)
        rate = base_rate if base_rate is not None else torch.full((vocab_size,), 0.01)
        self.register_buffer("log_base", rate.clamp(1e-6, 1 - 1e-6).log())
        with torch.no_grad():  # start at the base rate: an untrained adversary has zero gain
            last = self.net[-1] if hidden else self.net
            last.weight.mul_(0.01)
            last.bias.copy_(torch.logit(rate.clamp(1e-6, 1 - 1e-6)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def fit(self, x: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float, generator: torch.Generator) -> float:
        """Train (warm-started) with binary cross-entropy; returns the last epoch's mean loss."""
        self.requires_grad_(True)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        bs, loss_sum = 256, 0.0
        for _ in range(epochs):
            perm = torch.randperm(x.shape[0], generator=generator)
            loss_sum = 0.0
            for s in range(0, x.shape[0], bs):
                i = perm[s : s + bs]
                loss = F.binary_cross_entropy_with_logits(self(x[i]), y[i])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_sum += float(loss.detach()) * i.numel()
        self.requires_grad_(False)  # frozen while the policy is penalised through it
        return loss_sum / max(1, x.shape[0])

    def gain(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-row information gain on the true words (nats per word over the base rate); 0 without words."""
        logp = F.logsigmoid(self(x))
        n_true = y.sum(-1)
        g = ((logp - self.log_base) * y).sum(-1)
        return torch.where(n_true > 0, g / n_true.clamp_min(1.0), torch.zeros_like(g))

    @torch.no_grad()
    def recall_at_k(self, x: torch.Tensor, y: torch.Tensor, k: int = 10) -> float:
        """Mean share of each row's true words among its ``k`` highest-scoring words (rows with words only)."""
        top = self(x).topk(min(k, y.shape[1]), dim=-1).indices
        hit = y.gather(1, top).sum(-1)
        n_true = y.sum(-1)
        keep = n_true > 0
        if not bool(keep.any()):
            return 0.0
        return float((hit[keep] / n_true[keep].clamp(max=float(k))).mean())


class AwareObjective:
    """The extra terms for one calibration set: ``penalty(f_adv, f0, rows)`` and adversary retraining.

    Args:
        config: The weights and sizes.
        embeddings: The calibration embeddings ``(n, D)`` (all rows, train and validation).
        texts: The calibration texts, row-aligned (needed only when the adversary term is on).
        seed: Seed for the adversary's initialisation, batches and release noise.
    """

    def __init__(
        self, config: AwareRewardConfig, embeddings: torch.Tensor, texts: Sequence[str] | None = None, *, seed: int = 0
    ) -> None:
        self.config = config
        self.x = embeddings.float()
        self.nn = neighbour_indices(self.x, config.neighbours) if config.retrieval_weight > 0 else None
        self.generator = torch.Generator().manual_seed(seed)
        self.adversary: BagOfWordsAdversary | None = None
        self.targets: torch.Tensor | None = None
        self.last_recall = float("nan")
        if config.adversary_weight > 0:
            if texts is None or len(texts) != self.x.shape[0]:
                raise InvalidInputError(
                    "the adversary term needs the calibration texts, one per embedding "
                    "(Calibration.texts; calibrate() records them)"
                )
            _, y = content_vocabulary(texts, config.vocab_size)
            if y.shape[1] == 0:
                raise InvalidInputError("the calibration texts have no content words for the adversary")
            self.targets = torch.as_tensor(y)
            with torch.random.fork_rng():  # seeded initialisation without touching the caller's RNG
                torch.manual_seed(seed)
                self.adversary = BagOfWordsAdversary(
                    self.x.shape[1], y.shape[1], hidden=config.adversary_hidden, base_rate=self.targets.mean(0)
                )
            self.adversary.requires_grad_(False)

    def penalty(self, f_adv: torch.Tensor, f0: torch.Tensor, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-row ``total`` (weighted, to subtract from the reward) and its unweighted parts."""
        zero = torch.zeros(f_adv.shape[0], dtype=f_adv.dtype)
        drop, gain = zero, zero
        if self.nn is not None:
            drop = retrieval_drop(f_adv, f0, self.x[self.nn[rows]].to(f_adv.dtype))
        if self.adversary is not None and self.targets is not None:
            gain = self.adversary.gain(f_adv.float(), self.targets[rows]).clamp_min(0.0).to(f_adv.dtype)
        total = self.config.retrieval_weight * drop + self.config.adversary_weight * gain
        return {"total": total, "retrieval_drop": drop, "adversary_gain": gain}

    def due(self, step: int) -> bool:
        """Whether the adversary is retrained before policy step ``step`` (0 is the first)."""
        return self.adversary is not None and step % self.config.adversary_every == 0

    def retrain(self, releases: torch.Tensor, rows: torch.Tensor) -> float:
        """Retrain the adversary on ``releases`` of the calibration ``rows``; returns its recall@10 on them."""
        if self.adversary is None or self.targets is None:
            return float("nan")
        y = self.targets[rows]
        self.adversary.fit(
            releases.float(),
            y,
            epochs=self.config.adversary_epochs,
            lr=self.config.adversary_lr,
            generator=self.generator,
        )
        self.last_recall = self.adversary.recall_at_k(releases.float(), y)
        return self.last_recall
