"""Attacks on (protected) text embeddings: inversion, correction, adaptive fine-tuning,
keyword inference, a PII attribute probe and floor attackers; :func:`evaluate_attacks` runs them all."""

from __future__ import annotations

from .adaptive import adapt_inverter, protected_pairs
from .cache import cache_root, cached_embeddings, load_or_train_inverter
from .correction import Corrector, rerank, train_corrector
from .evaluate import MODES, evaluate_attacks
from .floor import best_constant, floor_metrics
from .inverter import Inverter, InverterConfig, TrainConfig
from .keyword import KeywordAttack
from .pii_probe import PIIProbe, pii_dataset, pii_sentences

__all__ = [
    "Inverter", "InverterConfig", "TrainConfig", "Corrector", "rerank", "train_corrector",
    "adapt_inverter", "protected_pairs", "KeywordAttack", "PIIProbe", "pii_dataset", "pii_sentences",
    "best_constant", "floor_metrics", "evaluate_attacks", "MODES", "cache_root", "cached_embeddings",
    "load_or_train_inverter",
]
