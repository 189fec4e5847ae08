"""The attacks package seen from a benchmark: which defenses to attack, with what budget, as flat rows.

:func:`run_attack` is the one place that calls :func:`textcrafter_rag.attacks.evaluate_attacks`;
:func:`privacy_fields` keeps the scalar part of its result for a result row, and :func:`floor_row`
turns the floor measured in the same run (an attacker that ignores the vector) into a table row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from textcrafter_rag.attacks import AttackConfig, Inverter, InverterTrainingConfig, evaluate_attacks
from textcrafter_rag.attacks.config import DEFAULT_ADAPT_CONFIG
from textcrafter_rag.mechanisms import Mechanism

from .grid import MechanismSpec
from .options import quiet_seed_warnings

__all__ = [
    "FLOOR_KEYS",
    "PRIVACY_KEYS",
    "SMOKE_TRAIN",
    "AttackRun",
    "fixed_adapt_config",
    "floor_row",
    "privacy_fields",
    "privacy_subset",
    "run_attack",
    "timed_adapt_config",
]

#: Two optimiser steps and no time budget (a time budget makes the step count depend on the machine's
#: load): the smoke sizes check the plumbing, not the attack.
SMOKE_TRAIN = InverterTrainingConfig(max_steps=2, time_budget_min=None, epochs=1.0, bf16=False)

PRIVACY_KEYS = (
    "bleu",
    "token_f1",
    "exact_match",
    "rouge_l",
    "content_f1",
    "cosine",
    "keyword_f1",
    "pii_auc",
    "attacker",
    "n_pairs",
    "pairs_seen",
    "adapt_minutes",
    "n_train",
    "n_test",
    "train_minutes",
    "attack_minutes",
)
FLOOR_KEYS = ("bleu", "token_f1", "exact_match", "rouge_l", "content_f1", "cosine")


@dataclass(frozen=True)
class AttackRun:
    """What every attack of one benchmark run shares; the mode is chosen per call (:func:`run_attack`).

    Attributes:
        encoder: The base encoder the defenses protect.
        train_texts: The attacker's own texts.
        test_texts: The victim texts whose protected vectors are attacked.
        attack: The attacker's settings (budget, beam, which attacks, seed, cache).
        progress: Show progress bars.
        inverter: A clean inverter to start from (``None``: the one ``attack`` trains or loads from its cache).
    """

    encoder: Any
    train_texts: Sequence[str]
    test_texts: Sequence[str]
    attack: AttackConfig = field(default_factory=AttackConfig)
    progress: bool = True
    inverter: Inverter | None = None

    @property
    def seed(self) -> int:
        """The attacker's seed (also the seed of the attacked defenses' noise in the benchmarks)."""
        return self.attack.seed


def run_attack(defense: Mechanism, mode: str, *, run: AttackRun) -> dict[str, Any]:
    """Every attack of ``run`` against ``defense`` in ``mode`` (``non-adaptive`` or ``adaptive``)."""
    with quiet_seed_warnings():
        return evaluate_attacks(
            defense,
            encoder=run.encoder,
            train_texts=run.train_texts,
            test_texts=run.test_texts,
            attack=replace(run.attack, mode=mode),
            inverter=run.inverter,
            progress=run.progress,
        )


def fixed_adapt_config() -> InverterTrainingConfig:
    """The fixed adaptive budget of the privacy tables: each of the ``n_pairs`` pairs is seen once, no time cap.

    A pair budget instead of a time budget makes the adaptive attacker independent of the machine's speed.
    """
    return replace(DEFAULT_ADAPT_CONFIG, time_budget_min=None, epochs=1.0)


def timed_adapt_config(minutes: float) -> InverterTrainingConfig:
    """The package's adaptive fine-tuning with a time budget of ``minutes`` instead of its default."""
    return replace(DEFAULT_ADAPT_CONFIG, time_budget_min=minutes)


def privacy_subset(grid: list[MechanismSpec], which: str) -> list[MechanismSpec]:
    """``all`` defenses, or ``core``: none, TextCrafter and the equal-norm Gaussians (the comparison that matters)."""
    if which == "all":
        return list(grid)
    return [s for s in grid if s.family in ("none", "textcrafter") or s.comparison == "equal_norm"]


def privacy_fields(result: dict[str, Any]) -> dict[str, Any]:
    """The flat, scalar part of an ``evaluate_attacks`` result (known keys and ``floor_*``)."""
    return {
        k: v
        for k, v in result.items()
        if (k in PRIVACY_KEYS or k.startswith("floor_")) and not isinstance(v, (dict, list, tuple))
    }


def floor_row(privacy_rows: Sequence[dict[str, Any]], **fields: Any) -> dict[str, Any] | None:
    """The ``floor`` reference row (best trivial attacker, ignores the vector) measured with ``privacy_rows``.

    Every privacy result carries the floor of its own run (``floor_*`` keys, same test texts); the first
    one is used. ``fields`` are extra columns (e.g. ``dataset``). ``None`` when no row has a floor.
    """
    first = next((r for r in privacy_rows if r.get("floor_content_f1") is not None), None)
    if first is None:
        return None
    floor = {k: first.get(f"floor_{k}") for k in FLOOR_KEYS}
    return {
        **fields,
        "mechanism_label": "floor (ignores the vector)",
        "mode": "–",
        "attacker": "best trivial",
        **floor,
        "pii_auc": 0.5,
    }
