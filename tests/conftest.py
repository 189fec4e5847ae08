from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


@pytest.fixture
def tiny_textcrafter():
    return make_textcrafter()


@pytest.fixture
def unit_vectors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="session")
def minilm():
    from textcrafter_rag.encoders import bundled_minilm

    return bundled_minilm()
