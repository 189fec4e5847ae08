"""The device step's second half: the headline and two-stage rows against the GPU-trained inverter.

Right after training (:mod:`.train`), in the same process (the attacker's sentences are embedded once),
each job attacks one defense on the bundle's victims with the freshly trained inverter:

* ``non-adaptive``: the clean inverter on the protected victim vectors;
* ``adaptive``: :func:`textcrafter_rag.attacks.adapt_inverter` itself (the package's adaptive attacker):
  a copy fine-tuned on ``n_pairs`` ``(text, defense.protect(vector))`` pairs of its own public sentences,
  one uncapped pass (the privacy tables' budget, ``benchmarks.common.attack_rows.fixed_adapt_config``).

Decoding is the package's default attacker (``AttackConfig``: beam 4, rerank by re-embedding, through the
defense when adaptive), as in :func:`textcrafter_rag.attacks.evaluate_attacks`, whose own call cannot run
on the GPU machine (it scores ROUGE-L with rouge-score, which is not there). The predictions of every row
are written (``adaptive.json``) so that ``record`` scores them here with the full package.

The defenses are the ones the published tables attack: no defense; the shipped TextCrafter policy at
eps 1.0 (the default); Gaussian noise at the same norm (the headline's comparison) and at the same SciFact
retrieval (``benchmarks/results/frontier_parity.md``'s 0.8 point, which the default keeps); the two-stage
store's Gaussian candidate vectors at the default doc strength and at the single-stage reference strength
that keeps 0.95 (``benchmarks/results/two_stage.md``), and at the query strength on SciFact queries. Jobs
run in :data:`JOBS` order and none starts after the deadline, so one device call fits its time limit.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .lean import lean_import

__all__ = [
    "ADAPTIVE_JSON",
    "DEFENSES",
    "GAUSSIAN_SAME_RETRIEVAL_S",
    "JOBS",
    "REFERENCE_STRENGTH",
    "AdaptiveRun",
    "Job",
    "adapt_config",
    "make_defense",
    "run_jobs",
]

ADAPTIVE_JSON = "adaptive.json"
#: Gaussian ``s`` that keeps 0.798 of clean SciFact NDCG@10 (``frontier_parity.md``, target 0.8), as the
#: default policy keeps 0.799 (51.90 of 64.97).
GAUSSIAN_SAME_RETRIEVAL_S = 0.06274
#: The single-stage Gaussian candidate strength that keeps 0.95 of clean NDCG@10 (``two_stage.md``).
REFERENCE_STRENGTH = 0.679
#: The defenses by label (built by :func:`make_defense`).
DEFENSES = (
    "none",
    "textcrafter:eps=1",
    "gaussian@norm=1",
    f"gaussian:s={GAUSSIAN_SAME_RETRIEVAL_S}",
    "two-stage-candidate:r=2",
    f"two-stage-candidate:r={REFERENCE_STRENGTH}",
    "two-stage-query:r=0.5",
)


@dataclass(frozen=True)
class Job:
    """One attack: a defense (a :data:`DEFENSES` label), ``non-adaptive`` or ``adaptive``, a victim corpus."""

    defense: str
    mode: str
    corpus: str = "wikitext"

    @property
    def label(self) -> str:
        return f"{self.corpus}/{self.defense}/{self.mode}"


#: Cheap rows first, then the adaptive attackers in order of importance.
JOBS = (
    Job("none", "non-adaptive"),
    Job("textcrafter:eps=1", "non-adaptive"),
    Job("gaussian@norm=1", "non-adaptive"),
    Job(f"gaussian:s={GAUSSIAN_SAME_RETRIEVAL_S}", "non-adaptive"),
    Job("two-stage-candidate:r=2", "non-adaptive"),
    Job("textcrafter:eps=1", "adaptive"),
    Job("gaussian@norm=1", "adaptive"),
    Job("two-stage-candidate:r=2", "adaptive"),
    Job(f"gaussian:s={GAUSSIAN_SAME_RETRIEVAL_S}", "adaptive"),
    Job(f"two-stage-candidate:r={REFERENCE_STRENGTH}", "adaptive"),
    Job("none", "non-adaptive", "scifact-queries"),
    Job("two-stage-query:r=0.5", "adaptive", "scifact-queries"),
    Job("none", "adaptive"),
)


@dataclass(frozen=True)
class AdaptiveRun:
    """Settings of the attack jobs.

    Attributes:
        n_pairs: The adaptive attacker's ``(text, protected vector)`` pairs (one pass).
        beam: Beam width (the candidates are reranked by re-embedding).
        seed: Seed of the attacker and of the defenses' noise.
        deadline_s: No job starts later than this many seconds after the device step began (``None``: all).
        jobs: Labels (:attr:`Job.label`) to run; empty: all of :data:`JOBS`.
    """

    n_pairs: int = 30_000
    beam: int = 4
    seed: int = 0
    deadline_s: float | None = None
    jobs: tuple[str, ...] = ()


def adapt_config() -> Any:
    """The adaptive fine-tuning of the privacy tables: one pass over the pairs, no time cap.

    The same settings as ``benchmarks.common.attack_rows.fixed_adapt_config`` (a test keeps them equal),
    which cannot be imported on the GPU machine: its package imports faiss.
    """
    config = lean_import("textcrafter_rag.attacks.config")
    return replace(config.DEFAULT_ADAPT_CONFIG, time_budget_min=None, epochs=1.0)


def _candidate_class() -> type:
    """The two-stage store's Gaussian candidate vectors as a mechanism (imported only when a job needs it)."""
    base = lean_import("textcrafter_rag.mechanisms.base").Mechanism
    two_stage = lean_import("textcrafter_rag.sealed.candidates")

    class CandidateNoise(base):  # type: ignore[misc,valid-type]
        """``x + r u`` rescaled to ``||x||`` with ``u`` a uniform unit direction: the core's ``noise_to_norm`` of
        ``random_directions``, what ``benchmarks.two_stage.candidates`` attacks (not importable here: faiss).
        Fresh directions on every call, as independent records get."""

        name: ClassVar[str] = "two-stage-candidate"

        def __init__(self, *, strength: float, seed: int) -> None:
            super().__init__()
            self.strength = float(strength)
            self._rng = np.random.default_rng(seed)

        def _protect(self, x: np.ndarray) -> np.ndarray:
            with self._lock:
                dirs = two_stage.random_directions(len(x), x.shape[1], self._rng)
            return two_stage.noise_to_norm(x, dirs, self.strength)

        def params(self) -> dict[str, Any]:
            return {"mechanism": "gaussian", "strength": self.strength}

        def expected_norm(self, dim: int) -> float:
            return self.strength

    return CandidateNoise


def make_defense(label: str, *, seed: int, dim: int) -> Any:
    """The mechanism of a :data:`DEFENSES` label, its noise seeded by ``seed``."""
    if label == "none":
        return lean_import("textcrafter_rag.mechanisms.simple").NoDefense()
    if label == "textcrafter:eps=1":
        return lean_import("textcrafter_rag.textcrafter.mechanism").TextCrafter.load_shipped(eps=1.0, seed=seed)
    simple = lean_import("textcrafter_rag.mechanisms.simple")
    if label == "gaussian@norm=1":
        return simple.GaussianNoise.at_norm(1.0, dim=dim, seed=seed)
    if label.startswith("gaussian:s="):
        return simple.GaussianNoise(s=float(label.split("=", 1)[1]), seed=seed)
    if label.startswith(("two-stage-candidate:r=", "two-stage-query:r=")):
        return _candidate_class()(strength=float(label.split("=", 1)[1]), seed=seed)
    raise ValueError(f"unknown defense {label!r}; choose from {DEFENSES}")


def _attack(
    job: Job,
    *,
    inverter: Any,
    encoder: Any,
    texts: Sequence[str],
    victims: tuple[list[str], np.ndarray],
    run: AdaptiveRun,
    cache_dir: Path,
    batch_size: int,
    score: Callable[..., dict[str, float]],
) -> dict[str, Any]:
    adaptive_mod = lean_import("textcrafter_rag.attacks.adaptive")
    rerank = lean_import("textcrafter_rag.attacks.correction").rerank
    refs, clean = victims
    t0 = time.time()
    defense = make_defense(job.defense, seed=run.seed, dim=clean.shape[1])
    protected = adaptive_mod.query_defense(defense, clean)  # before the attacker's queries, as evaluate_attacks
    attacker, info = inverter, {}
    if job.mode == "adaptive":
        attacker, info = adaptive_mod.adapt_inverter(
            inverter,
            defense,
            encoder=encoder,
            texts=texts,
            n_pairs=run.n_pairs,
            train_config=adapt_config(),
            cache_dir=cache_dir,
            seed=run.seed,
            progress=False,
        )

        def embed(t: list[str]) -> np.ndarray:
            return adaptive_mod.query_defense(defense, encoder.encode(t))
    else:
        embed = encoder.encode
    cands = attacker.generate(protected, beam=run.beam, num_return=run.beam, batch_size=batch_size)
    preds = rerank(cands, protected, embed)[0]
    norm = float(np.linalg.norm(protected - clean, axis=1).mean())
    return {
        "corpus": job.corpus,
        "defense": job.defense,
        "mechanism_spec": str(getattr(defense, "spec", lambda: job.defense)()),
        "mode": job.mode,
        "attacker": ("adaptive-" if job.mode == "adaptive" else "") + f"inverter-beam{run.beam}-rerank",
        "n_test": len(refs),
        "perturbation_norm": round(norm, 4),
        **{k: info[k] for k in ("n_pairs", "pairs_seen", "adapt_train_minutes") if k in info},
        **score(refs, preds, embed=encoder.encode, ref_vectors=clean),
        "minutes": round((time.time() - t0) / 60, 3),
        "predictions": preds,
    }


def run_jobs(
    *,
    inverter: Any,
    encoder: Any,
    texts: Sequence[str],
    corpora: dict[str, tuple[list[str], np.ndarray]],
    run: AdaptiveRun,
    out: Path,
    cache_dir: Path,
    started: float,
    batch_size: int,
    score: Callable[..., dict[str, float]],
    meta: dict[str, Any],
) -> list[dict[str, Any]]:
    """Run the jobs in order, writing ``out / adaptive.json`` after each (a job that fails is recorded, not fatal).

    Args:
        inverter, encoder: The trained clean inverter and the encoder of the attacker's texts.
        texts: The attacker's own public sentences (the clean inverter's training set).
        corpora: Victims by corpus name: ``(texts, exact clean vectors)``; jobs on a missing corpus are skipped.
        started: ``time.time()`` when the device step began (the deadline counts from it).
        score: ``(refs, preds, *, embed, ref_vectors) -> metrics`` (the strength rows' metrics).
        meta: Recorded as the file's ``meta`` (with the run's settings added).
    """
    wanted = set(run.jobs)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    doc = {"meta": {**meta, "adaptive_run": asdict(run), "adapt_config": asdict(adapt_config())}}
    for job in JOBS:
        if wanted and job.label not in wanted:
            continue
        why = None
        if job.corpus not in corpora:
            why = "no victims of this corpus in the bundle"
        elif run.deadline_s is not None and time.time() - started > run.deadline_s:
            why = "deadline"
        if why is None:
            try:
                rows.append(
                    _attack(
                        job,
                        inverter=inverter,
                        encoder=encoder,
                        texts=texts,
                        victims=corpora[job.corpus],
                        run=run,
                        cache_dir=cache_dir,
                        batch_size=batch_size,
                        score=score,
                    )
                )
                r = rows[-1]
                print(f"[adaptive] {job.label}: content-F1 {r['content_f1']:.2f} ({r['minutes']:.2f} min)", flush=True)
            except Exception as exc:  # one failed job must not lose the others' rows
                why = f"{type(exc).__name__}: {exc}"
                print(f"[adaptive] {job.label} failed:\n{traceback.format_exc()}", flush=True)
        if why is not None:
            skipped.append({"job": job.label, "why": why[:500]})
        doc.update(rows=rows, skipped=skipped, elapsed_minutes=round((time.time() - started) / 60, 2))
        (out / ADAPTIVE_JSON).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return rows
