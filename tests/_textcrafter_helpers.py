"""Shared test helpers (a uniquely named module: ``conftest`` names clash across test folders)."""

from __future__ import annotations

import torch


def make_textcrafter(dim: int = 32, *, eps: float = 2.5, seed: int | None = 0, init_seed: int = 0, **kwargs):
    """A TextCrafter with an untrained policy and a synthetic PII classifier/prior (no encoder needed)."""
    from textcrafter_rag.mechanisms.textcrafter import TextCrafter
    from textcrafter_rag.pii import PIIClassifier
    from textcrafter_rag.policy import PolicyConfig, TextCrafterPolicy
    from textcrafter_rag.priors import ClusterPrior

    torch.manual_seed(init_seed)
    g = torch.Generator().manual_seed(init_seed)
    policy = TextCrafterPolicy(PolicyConfig(dim=dim, heads=4))
    pii = PIIClassifier(weight=torch.randn(dim, generator=g), bias=torch.tensor(0.0))
    centroids = torch.nn.functional.normalize(torch.randn(6, dim, generator=g), dim=-1)
    prior = ClusterPrior(centroids=centroids, safe=torch.tensor([True, False, True, False, True, False]))
    return TextCrafter(policy=policy, eps=eps, pii=pii, prior=prior, seed=seed, **kwargs)
