"""Attacks on (protected) text embeddings: inversion, correction, adaptive fine-tuning,
keyword inference, a PII attribute probe and floor attackers; :func:`evaluate_attacks` runs them all.

:class:`AttackConfig` describes the attacker once for :func:`evaluate_attacks`, ``textcrafter attack``
and ``textcrafter audit``. Layout: the decoder network in :mod:`.inverter_model`, its training and
persistence in :mod:`.inverter`, greedy and beam decoding in :mod:`.inverter_decoding`.
"""

from __future__ import annotations

from .adaptive import adapt_inverter, protected_pairs, query_defense
from .cache import attacker_embeddings, cache_root, load_or_train_inverter
from .config import MODES, AttackConfig
from .correction import Corrector, rerank, train_corrector
from .evaluate import clean_inverter, evaluate_attacks
from .floor import best_constant, constant_token_f1, floor_metrics
from .inverter import Inverter, InverterTrainingConfig
from .inverter_model import InverterConfig
from .keyword import KeywordAttack
from .pii_probe import PIIProbe, pii_dataset, pii_sentences

__all__ = [
    "MODES",
    "AttackConfig",
    "Corrector",
    "Inverter",
    "InverterConfig",
    "KeywordAttack",
    "PIIProbe",
    "InverterTrainingConfig",
    "adapt_inverter",
    "best_constant",
    "constant_token_f1",
    "cache_root",
    "attacker_embeddings",
    "clean_inverter",
    "evaluate_attacks",
    "floor_metrics",
    "load_or_train_inverter",
    "pii_dataset",
    "pii_sentences",
    "protected_pairs",
    "query_defense",
    "rerank",
    "train_corrector",
]
