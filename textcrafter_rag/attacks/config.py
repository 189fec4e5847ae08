"""The attacker's settings, shared by :func:`~.evaluate.evaluate_attacks`, ``textcrafter attack`` and the audit.

One frozen :class:`AttackConfig` replaces the long keyword lists these entry points had, so the
benchmark, the command line and the store audit describe an attacker the same way and a new
setting is added in one place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..errors import InvalidInputError
from .inverter import InverterTrainingConfig
from .inverter_model import InverterConfig

__all__ = [
    "DEFAULT_ADAPT_CONFIG",
    "MODES",
    "QUICK_ADAPT",
    "QUICK_N_PAIRS",
    "QUICK_N_PII",
    "QUICK_TRAIN",
    "AttackConfig",
]

#: Attacker modes: a clean-trained inverter, or one fine-tuned on the defense's own outputs.
MODES = ("non-adaptive", "adaptive")
#: Clean-inverter training of ``quick`` runs (smoke runs: numbers are not meaningful).
QUICK_TRAIN = InverterTrainingConfig(time_budget_min=1.0)
#: Adaptive fine-tuning of ``quick`` runs.
QUICK_ADAPT = InverterTrainingConfig(epochs=1.0, time_budget_min=0.5, lr=3e-4, warmup_steps=5)
#: Adaptive fine-tuning defaults: one pass over the pairs, capped at 20 minutes.
DEFAULT_ADAPT_CONFIG = InverterTrainingConfig(epochs=1.0, time_budget_min=20.0, lr=3e-4, warmup_steps=20)
#: Caps of ``quick`` runs on the adaptive query budget and on the synthetic PII sets.
QUICK_N_PAIRS = 2000
QUICK_N_PII = 600
#: Attacker texts the keyword attack trains on (full and ``quick`` runs).
KEYWORD_TEXTS, QUICK_KEYWORD_TEXTS = 20_000, 2000


@dataclass(frozen=True)
class AttackConfig:
    """What the attacker may do and how hard it tries.

    Attributes:
        mode: ``non-adaptive`` (a clean inverter applied to protected vectors) or ``adaptive`` (the
            inverter fine-tuned on ``n_pairs`` protected vectors of its own texts). The audit always
            runs the non-adaptive attacker and, with ``adaptive``, the adaptive one as well.
        n_pairs: Adaptive query budget: ``(text, protected vector)`` pairs (at most 2,000 when ``quick``).
        quick: Small, fast smoke run: 2,000 training texts, minute-long training, 64 test texts
            (64 sampled rows in the audit). Numbers are not meaningful.
        beam: Beam width of the inverter (1 = greedy).
        rerank: Rerank the beam by black-box re-embedding (through the defense in adaptive mode).
        keyword: Run the keyword-inference attack.
        pii: Run the PII attribute probe.
        n_pii: Size of each synthetic PII train / test set (at most 600 when ``quick``).
        n_examples: ``[reference, reconstruction]`` pairs kept (reconstructions shown in an audit report).
        seed: Seed of the attacker's randomness (never of the defense).
        cache_dir: Cache of clean embeddings of the attacker's texts and of trained inverters
            (default ``$TEXTCRAFTER_ATTACK_CACHE`` or ``~/.cache/textcrafter_rag/attacks``).
        data_dir: Benchmark datasets: the commands take the attacker's own texts from WikiText-2 there
            when present (:func:`~.cli.attack_texts`), else from BBC News plus synthetic PII.
        inverter_config: Clean-inverter architecture (default :class:`~.inverter_model.InverterConfig`).
        train_config: Clean-inverter training (default :data:`QUICK_TRAIN` when ``quick``, else
            ``InverterTrainingConfig()``
            with ``seed``); part of the inverter's cache key.
        adapt_config: Adaptive fine-tuning (default :data:`QUICK_ADAPT` or :data:`DEFAULT_ADAPT_CONFIG`).
    """

    mode: str = "non-adaptive"
    n_pairs: int = 30_000
    quick: bool = False
    beam: int = 4
    rerank: bool = True
    keyword: bool = True
    pii: bool = True
    n_pii: int = 4000
    n_examples: int = 5
    seed: int = 0
    cache_dir: str | os.PathLike[str] | None = None
    data_dir: str | os.PathLike[str] | None = None
    inverter_config: InverterConfig | None = None
    train_config: InverterTrainingConfig | None = None
    adapt_config: InverterTrainingConfig | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("n_pairs", "beam", "n_pii"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.n_examples < 0:
            raise InvalidInputError(f"n_examples must be >= 0, got {self.n_examples!r}")

    @property
    def adaptive(self) -> bool:
        """Whether the adaptive attacker runs."""
        return self.mode == "adaptive"

    @property
    def pairs_budget(self) -> int:
        """The adaptive query budget actually used (capped in quick runs)."""
        return min(self.n_pairs, QUICK_N_PAIRS) if self.quick else self.n_pairs

    @property
    def pii_size(self) -> int:
        """The size of each synthetic PII set actually used (capped in quick runs)."""
        return min(self.n_pii, QUICK_N_PII) if self.quick else self.n_pii

    @property
    def keyword_size(self) -> int:
        """How many of the attacker's texts the keyword attack trains on."""
        return QUICK_KEYWORD_TEXTS if self.quick else KEYWORD_TEXTS

    def architecture(self) -> InverterConfig:
        """The clean inverter's architecture."""
        return self.inverter_config or InverterConfig()

    def clean_training(self) -> InverterTrainingConfig:
        """The clean inverter's training settings; the attacker's ``seed`` unless ``train_config`` is given."""
        if self.train_config is not None:
            return self.train_config
        return replace(QUICK_TRAIN if self.quick else InverterTrainingConfig(), seed=self.seed)

    def adapt_training(self) -> InverterTrainingConfig:
        """The adaptive attacker's fine-tuning settings."""
        return self.adapt_config or (QUICK_ADAPT if self.quick else DEFAULT_ADAPT_CONFIG)
