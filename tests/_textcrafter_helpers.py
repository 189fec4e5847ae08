"""Shared test helpers (a uniquely named module: ``conftest`` names clash across test folders)."""

from __future__ import annotations

import numpy as np
import torch


def make_textcrafter(dim: int = 32, *, eps: float = 2.5, seed: int | None = 0, init_seed: int = 0, **kwargs):
    """A TextCrafter with an untrained policy and a synthetic PII classifier/prior (no encoder needed)."""
    from textcrafter_rag.textcrafter import TextCrafter
    from textcrafter_rag.textcrafter.pii import PIIClassifier
    from textcrafter_rag.textcrafter.policy import PolicyConfig, TextCrafterPolicy
    from textcrafter_rag.textcrafter.priors import ClusterPrior

    torch.manual_seed(init_seed)
    g = torch.Generator().manual_seed(init_seed)
    policy = TextCrafterPolicy(PolicyConfig(dim=dim, heads=4))
    pii = PIIClassifier(weight=torch.randn(dim, generator=g), bias=torch.tensor(0.0))
    centroids = torch.nn.functional.normalize(torch.randn(6, dim, generator=g), dim=-1)
    prior = ClusterPrior(centroids=centroids, safe=torch.tensor([True, False, True, False, True, False]))
    return TextCrafter(policy=policy, eps=eps, pii=pii, prior=prior, seed=seed, **kwargs)


#: The tiny inverter shared by the attack and audit tests (trained once per session: ``tiny_inverter``).
TINY_INVERTER_SENTENCES = [
    "the river flows into the sea.",
    "she played the violin at the concert.",
    "rain fell on the quiet village.",
    "the committee approved the new budget.",
]


def tiny_inverter_config():
    """A one-layer, 64-wide inverter that overfits :data:`TINY_INVERTER_SENTENCES` in seconds."""
    from textcrafter_rag.attacks import InverterConfig

    return InverterConfig(d_model=64, n_layers=1, n_heads=4, d_ff=128, n_prefix=2, max_len=12, init_from_encoder=False)


def train_tiny_inverter(encoder):
    """Overfit the tiny inverter on :data:`TINY_INVERTER_SENTENCES` (CPU, 1 thread, deterministic)."""
    from textcrafter_rag.attacks import Inverter, InverterTrainingConfig

    emb = encoder.encode(TINY_INVERTER_SENTENCES)
    return Inverter.train(
        emb,
        TINY_INVERTER_SENTENCES,
        config=tiny_inverter_config(),
        encoder=encoder,
        device="cpu",
        progress=False,
        train_config=InverterTrainingConfig(
            batch_size=4, lr=3e-3, warmup_steps=5, epochs=200, time_budget_min=None, bf16=False, seed=0, threads=1
        ),
    )


def trigram_encoder(dim: int):
    """A deterministic stand-in encoder: hashed character trigrams, unit-normalised, ``dim``-d."""

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim))
        for i, t in enumerate(texts):
            for j in range(len(t) - 2):
                out[i, sum(map(ord, t[j : j + 3])) % dim] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return encode
