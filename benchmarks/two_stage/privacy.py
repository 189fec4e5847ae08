"""Privacy of what a two-stage store holds: inversion of the stored candidate vectors and of the query vectors.

The frontier's attack plan (:class:`~benchmarks.frontier_attacks.AttackPlan`) runs every attack: WikiText-2
test sentences and synthetic PII notes (entity recovery) for the candidate vectors, SciFact test queries for
the query vectors. ``none`` is the clean inverter on clean vectors (as in the frontier); each candidate strength
is attacked by the adaptive attacker, fine-tuned on candidate vectors of its own texts. The query vectors use
the same mechanism at the query strength, so they share that strength's adaptive attacker.

Two attackers: the default budget (:mod:`.budget`), smaller than the frontier's parity attacker (its numbers
are lower bounds), or the parity attacker: a clean inverter trained elsewhere (``--inverter``, e.g. by
``benchmarks.privacy.attack_strength``) and one uncapped pass over ``--adapt-pairs`` adaptive pairs. A
``reference`` job attacks the single-stage Gaussian release that keeps 0.95 of clean NDCG@10, the default
rule's comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common.attack_rows import SMOKE_TRAIN, AttackRun, fixed_adapt_config, privacy_fields, run_attack
from benchmarks.common.caches import cache_key
from benchmarks.common.options import quiet_seed_warnings
from benchmarks.common.reporting import clean_json
from benchmarks.privacy.frontier.attacks import AttackPlan, AttackSizes
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.embedding import texts_hash
from textcrafter_rag.mechanisms import Mechanism, NoDefense

from .budget import adapt_training, clean_training
from .candidates import CandidateMechanism

__all__ = ["PrivacyJob", "PrivacyPlan", "attack_config", "privacy_jobs"]


def attack_config(size: str, *, seed: int, pairs: int, cache: Path, parity: bool = False) -> AttackConfig:
    """The attacker of this benchmark: :mod:`.budget`'s training (``parity``: one uncapped pass over the pairs,
    as the frontier's parity attacker), no keyword or PII-probe side attacks."""
    attack = AttackConfig(
        n_pairs=pairs,
        keyword=False,
        pii=False,
        seed=seed,
        train_config=clean_training(seed),
        adapt_config=fixed_adapt_config() if parity else adapt_training(),
    )
    if size == "smoke":
        attack = replace(
            attack, train_config=SMOKE_TRAIN, adapt_config=SMOKE_TRAIN, beam=1, cache_dir=cache / "attacks"
        )
    return attack


@dataclass(frozen=True)
class PrivacyJob:
    """One attack: a target (``docs`` on ``wikitext``/``pii``, ``queries`` on SciFact queries) at a strength.

    ``reference`` names a job that is not a two-stage setting but a release the rule compares with.
    """

    target: str
    corpus: str
    strength: float | None
    reference: str | None = None

    @property
    def mode(self) -> str:
        return "non-adaptive" if self.strength is None else "adaptive"

    @property
    def label(self) -> str:
        strength = "none" if self.strength is None else f"{self.strength:.4g}"
        ref = f" ({self.reference})" if self.reference else ""
        return f"{self.target}/{self.corpus}/{strength}/{self.mode}{ref}"


def privacy_jobs(
    doc_strengths: Sequence[float],
    query_strengths: Sequence[float],
    *,
    pii_strengths: Sequence[float],
    reference: tuple[str, float] | None = None,
) -> list[PrivacyJob]:
    """The attacks in order of importance (the run stops starting new ones at its deadline); ``reference`` is
    ``(name, strength)`` of the single-stage release the rule compares with, attacked on WikiText-2."""
    wiki = [PrivacyJob("docs", "wikitext", r) for r in doc_strengths]
    queries = [PrivacyJob("queries", "scifact-queries", q) for q in query_strengths]
    pii = [PrivacyJob("docs", "pii", r) for r in pii_strengths]
    ref = [] if reference is None else [PrivacyJob("docs", "wikitext", reference[1], reference=reference[0])]
    return [
        PrivacyJob("docs", "wikitext", None),
        *wiki[:1],
        *ref,
        PrivacyJob("queries", "scifact-queries", None),
        *queries[:1],
        *wiki[1:2],
        PrivacyJob("docs", "pii", None),
        *pii,
        *wiki[2:],
        *queries[1:],
    ]


@dataclass
class PrivacyPlan:
    """The frontier's attack plan plus the SciFact queries as a victim corpus, with one cached row per job."""

    plan: AttackPlan
    queries: list[str]
    cache: Path

    def mechanism(self, strength: float | None) -> Mechanism:
        if strength is None:
            return NoDefense()
        with quiet_seed_warnings():
            return CandidateMechanism(mechanism="gaussian", strength=strength, seed=self.plan.attack.seed)

    def attacker_note(self) -> str:
        """Who the parity attacker is: the saved clean inverter's training record and identity."""
        inv = self.plan.clean
        runs = inv.meta.get("training", [])
        minutes = sum(float(t.get("train_minutes", 0.0)) for t in runs)
        steps = sum(int(t.get("steps", 0)) for t in runs)
        n_train = max((int(t.get("n_train", 0)) for t in runs), default=0)
        return (
            f"parity attacker: clean inverter {self.plan.inverter} ({inv.model.cfg.n_layers} layers, trained "
            f"{minutes:.1f} min, {steps} steps on {n_train} sentences; weights sha256 {self.plan.inverter_id[:16]}), "
            "beam 4 + rerank, "
            f"adapted by one uncapped pass over {self.plan.sizes.pairs} pairs"
        )

    def query_texts(self) -> list[str]:
        tok = self.plan.encoder.model.tokenizer
        limit = self.plan.attack.architecture().max_len
        fits = [q for q in self.queries if len(tok(q, add_special_tokens=False)["input_ids"]) <= limit]
        return fits[: self.plan.sizes.n_test]

    def _query_path(self, job: PrivacyJob, mech: Mechanism) -> Path:
        key = cache_key(
            "two-stage-query-row-v2",
            mech.spec(),
            job.mode,
            self.plan.sizes.pairs,
            texts_hash(self.query_texts()),
            texts_hash(self.plan.wikitext_train),
            repr(replace(self.plan.attack, cache_dir=None)),
            self.plan.inverter_id,
        )
        return self.cache / "two_stage" / "privacy" / f"{key}.json"

    def is_cached(self, job: PrivacyJob) -> bool:
        """Whether ``job``'s row was measured before (a cached row is reported even past the deadline)."""
        mech = self.mechanism(job.strength)
        if job.target == "docs":
            return self.plan.cached_row(mech, job.mode, job.corpus)[1] is not None
        return self._query_path(job, mech).is_file()

    def measure(self, job: PrivacyJob) -> dict[str, Any]:
        """The row of ``job`` (from the cache when measured before)."""
        mech = self.mechanism(job.strength)
        if job.target == "docs":
            return self.plan.measure(mech, job.mode, job.corpus)
        path = self._query_path(job, mech)
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
        test = self.query_texts()
        t0 = time.perf_counter()
        run = AttackRun(
            encoder=self.plan.encoder,
            train_texts=self.plan.wikitext_train,
            test_texts=test,
            attack=replace(self.plan.attack, n_examples=3),
            inverter=self.plan.clean,
            progress=self.plan.progress,
        )
        result = run_attack(mech, job.mode, run=run)
        row = privacy_fields(result)
        row["attacker_model"] = row.pop("attacker", None)
        row.update(
            pairs=result.get("n_pairs", 0) if job.mode == "adaptive" else 0,
            examples=[list(e) for e in result.get("examples", [])[:3]],
            minutes=(time.perf_counter() - t0) / 60,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(clean_json(row)), encoding="utf-8")
        return row


def make_plan(
    *,
    encoder: Any,
    data_dir: Path,
    scifact_docs: list[str],
    queries: list[str],
    size: str,
    sizes: AttackSizes,
    seed: int,
    cache: Path,
    progress: bool,
    inverter: Path | None = None,
) -> PrivacyPlan:
    """The privacy plan of a run of ``size``; ``inverter`` (a saved clean inverter) makes it the parity attacker."""
    attack = attack_config(size, seed=seed, pairs=sizes.pairs, cache=cache, parity=inverter is not None)
    plan = AttackPlan(
        inverter=inverter,
        encoder=encoder,
        data_dir=data_dir,
        scifact_docs=scifact_docs,
        sizes=sizes,
        attack=attack,
        cache=cache,
        pii_tuning=SMOKE_TRAIN if size == "smoke" else fixed_adapt_config(),
        progress=progress,
    )
    return PrivacyPlan(plan=plan, queries=queries, cache=cache)


def run_privacy(
    pplan: PrivacyPlan,
    jobs: Sequence[PrivacyJob],
    *,
    deadline: float | None,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run ``jobs`` in order (cached ones always; new ones only before ``deadline``); rows and skipped labels."""
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for job in jobs:
        mech = pplan.mechanism(job.strength)
        if not pplan.is_cached(job) and deadline is not None and time.perf_counter() > deadline:
            skipped.append(job.label)
            continue
        res = pplan.measure(job)
        rows.append(
            {
                "part": "privacy",
                "target": job.target,
                "corpus": job.corpus,
                "doc_strength": job.strength,
                "reference": job.reference,
                "mode": job.mode,
                "defense": mech.spec(),
                **res,
            }
        )
        print(
            f"[two_stage] privacy {job.label}: content-F1 {res.get('content_f1', float('nan')):.2f} "
            f"({res.get('minutes', 0.0):.1f} min)",
            flush=True,
        )
        if on_row is not None:
            on_row(rows)
    return rows, skipped
