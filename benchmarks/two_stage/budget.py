"""The attacker budget this benchmark can afford on 2 shared cores (weaker than the frontier's parity attacker).

The parity attacker of ``frontier_parity`` trained its clean inverter for about 65 minutes and adapted on
30,000 pairs; this run names a smaller budget, so its privacy numbers are lower bounds on what a parity
attacker reads. Pre-training the clean inverter with :func:`clean_training` fills the attacks cache that the
privacy part then loads (same key).
"""

from __future__ import annotations

from dataclasses import replace

from textcrafter_rag.attacks import InverterTrainingConfig
from textcrafter_rag.attacks.config import DEFAULT_ADAPT_CONFIG

__all__ = ["ADAPT_MINUTES", "CLEAN_MINUTES", "N_PAIRS", "N_TRAIN", "adapt_training", "clean_training"]

#: The clean inverter trains on the first ``N_TRAIN`` WikiText-2 train sentences (parity: all ~43,000).
N_TRAIN = 10_000
#: Wall-clock budget of the clean inverter's training.
CLEAN_MINUTES = 12.0
#: Adaptive fine-tuning: one pass over ``N_PAIRS`` pairs, capped at ``ADAPT_MINUTES``.
ADAPT_MINUTES = 3.0
N_PAIRS = 3000


def clean_training(seed: int) -> InverterTrainingConfig:
    """The clean inverter's training settings (part of its cache key)."""
    return replace(InverterTrainingConfig(), time_budget_min=CLEAN_MINUTES, seed=seed)


def adapt_training() -> InverterTrainingConfig:
    """The adaptive attacker's fine-tuning settings."""
    return replace(DEFAULT_ADAPT_CONFIG, time_budget_min=ADAPT_MINUTES)
