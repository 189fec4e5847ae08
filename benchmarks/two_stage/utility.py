"""Utility on SciFact: end-to-end NDCG@10 and recall@fetch_k of two-stage search, per mechanism and strength.

For each mechanism, document strength, query strength and noise seed, stage 1 runs once at the largest
``fetch_k``; every smaller ``fetch_k`` is a prefix of it. Documents keep the same draws across query
strengths (paired comparison). Rows average over seeds (``ndcg10_std`` is their standard deviation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .candidates import DIRECTION_MECHANISMS, NATIVE_MECHANISMS, candidate_vectors
from .search import SealedVectors, evaluate_two_stage, fetch_candidates, ndcg_recall

__all__ = [
    "Corpus",
    "UtilityGrid",
    "clean_ndcg10",
    "measure_config",
    "one_stage_strength",
    "seed_mean_rows",
    "utility_rows",
]

#: Seed offsets: documents and queries draw from separate streams.
DOC_STREAM, QUERY_STREAM = 1_000, 2_000


@dataclass(frozen=True)
class Corpus:
    """A retrieval store as arrays: clean document and query vectors, ids and judgements."""

    doc_ids: list[str]
    query_ids: list[str]
    qrels: dict[str, set[str]]
    docs: np.ndarray
    queries: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)


@dataclass(frozen=True)
class UtilityGrid:
    """What the utility part measures.

    Attributes:
        doc_strengths: Gaussian candidate strengths ``r``.
        query_strengths: Query noise strengths (``None`` = the clean query is sent).
        fetch_ks: Candidates fetched before the re-rank.
        seeds: Noise seeds (offsets added to the run's seed).
        other_mechanisms: The non-Gaussian candidate mechanisms.
        other_strengths: Their strengths (direction mechanisms; the native policies use their own).
        other_query_strengths: Query strengths for the non-Gaussian mechanisms.
        encoding_probe: ``(doc_strength, query_strength, fetch_k)`` where int8 and float32 sealed vectors are
            compared with float16.
    """

    doc_strengths: tuple[float, ...]
    query_strengths: tuple[float | None, ...]
    fetch_ks: tuple[int, ...]
    seeds: tuple[int, ...]
    other_mechanisms: tuple[str, ...]
    other_strengths: tuple[float, ...]
    other_query_strengths: tuple[float | None, ...]
    encoding_probe: tuple[float, float | None, int]


def clean_ndcg10(corpus: Corpus) -> float:
    """NDCG@10 of clean queries against clean documents (exact cosine)."""
    stage = fetch_candidates(corpus.docs, corpus.queries, max_k=10)
    return ndcg_recall(stage.idx, corpus.doc_ids, corpus.query_ids, corpus.qrels, k=10)[0]


def one_stage_strength(corpus: Corpus, *, ratio: float, seed: int, iters: int = 14) -> tuple[float, float]:
    """The Gaussian strength ``r`` whose candidate vectors, searched alone (clean queries), keep ``ratio`` of clean
    NDCG@10, by bisection on one seeded draw; returns ``(r, measured ratio)``.

    That is the single-stage Gaussian release the default rule compares the two-stage store's vectors with.
    """
    clean = clean_ndcg10(corpus)

    def kept(r: float) -> float:
        cand = candidate_vectors(corpus.docs, mechanism="gaussian", strength=r, seed=seed + DOC_STREAM)[0]
        idx = fetch_candidates(cand, corpus.queries, max_k=10).idx
        return ndcg_recall(idx, corpus.doc_ids, corpus.query_ids, corpus.qrels, k=10)[0] / clean

    lo, hi = 0.0, 4.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kept(mid) >= ratio else (lo, mid)
    return lo, kept(lo)


def query_vectors(corpus: Corpus, strength: float | None, seed: int) -> np.ndarray:
    """The query vectors the store receives: clean, or Gaussian candidates at ``strength``."""
    if strength is None:
        return corpus.queries
    return candidate_vectors(corpus.queries, mechanism="gaussian", strength=strength, seed=seed + QUERY_STREAM)[0]


def measure_config(
    corpus: Corpus,
    candidate_docs: np.ndarray,
    *,
    query_strength: float | None,
    seed: int,
    fetch_ks: Sequence[int],
    sealed: SealedVectors,
) -> dict[int, dict[str, float]]:
    """Two-stage metrics per ``fetch_k`` for one set of candidate documents and one query setting."""
    stage = fetch_candidates(candidate_docs, query_vectors(corpus, query_strength, seed), max_k=max(fetch_ks))
    return evaluate_two_stage(
        stage,
        sealed,
        corpus.queries,
        doc_ids=corpus.doc_ids,
        query_ids=corpus.query_ids,
        qrels=corpus.qrels,
        fetch_ks=fetch_ks,
    )


def seed_mean_rows(
    per_seed: list[dict[int, dict[str, float]]], fields: dict[str, Any], clean: float
) -> list[dict[str, Any]]:
    """One two-stage row per ``fetch_k`` and one single-stage row, averaged over seeds."""
    rows = []
    ks = list(per_seed[0])
    for f in ks:
        nd = [s[f]["ndcg10"] for s in per_seed]
        rows.append(
            {
                **fields,
                "search": "two-stage",
                "fetch_k": f,
                "ndcg10": float(np.mean(nd)),
                "ndcg10_std": float(np.std(nd)),
                "ndcg_ratio": float(np.mean(nd)) / clean,
                "recall_at_fetch_k": float(np.mean([s[f]["recall_at_fetch_k"] for s in per_seed])),
                "single_stage_ndcg10": float(np.mean([s[f]["single_stage_ndcg10"] for s in per_seed])),
            }
        )
    single = [per_seed[i][ks[0]]["single_stage_ndcg10"] for i in range(len(per_seed))]
    rows.append(
        {
            **fields,
            "search": "single-stage",
            "fetch_k": None,
            "ndcg10": float(np.mean(single)),
            "ndcg10_std": float(np.std(single)),
            "ndcg_ratio": float(np.mean(single)) / clean,
        }
    )
    return rows


def utility_rows(
    corpus: Corpus, grid: UtilityGrid, *, seed: int, basis: np.ndarray | None, progress: bool
) -> list[dict[str, Any]]:
    """Every utility row: the clean reference, each mechanism x strength x query strength, the encoding probe."""
    clean = clean_ndcg10(corpus)
    base = {"part": "utility", "n_docs": corpus.n_docs, "distractors": None, "clean_ndcg10": clean}
    rows: list[dict[str, Any]] = [
        {
            **base,
            "mechanism": "none",
            "search": "clean",
            "doc_strength": 0.0,
            "query_strength": None,
            "fetch_k": None,
            "ndcg10": clean,
            "ndcg_ratio": 1.0,
            "encoding": "float32",
        }
    ]
    sealed = SealedVectors.of(corpus.docs, encoding="float16")
    jobs: list[tuple[str, float | None, tuple[float | None, ...]]] = [
        ("gaussian", r, grid.query_strengths) for r in grid.doc_strengths
    ]
    for mech in grid.other_mechanisms:
        strengths = [None] if mech in NATIVE_MECHANISMS else list(grid.other_strengths)
        if mech not in NATIVE_MECHANISMS and mech not in DIRECTION_MECHANISMS:
            raise ValueError(f"unknown candidate mechanism {mech!r}")
        jobs += [(mech, r, grid.other_query_strengths) for r in strengths]
    for mech, r, qstrengths in tqdm(jobs, desc="Utility", disable=not progress):
        per_q: dict[float | None, list[dict[int, dict[str, float]]]] = {q: [] for q in qstrengths}
        norms = []
        for s in grid.seeds:
            cand, norm = candidate_vectors(
                corpus.docs, mechanism=mech, strength=r, seed=seed + s + DOC_STREAM, basis=basis
            )
            norms.append(norm)
            for q in qstrengths:
                per_q[q].append(
                    measure_config(corpus, cand, query_strength=q, seed=seed + s, fetch_ks=grid.fetch_ks, sealed=sealed)
                )
        for q, per_seed in per_q.items():
            fields = {
                **base,
                "mechanism": mech,
                "doc_strength": float(np.mean(norms)),
                "query_strength": q,
                "encoding": "float16",
                "n_seeds": len(grid.seeds),
            }
            rows += seed_mean_rows(per_seed, fields, clean)
    rows += encoding_rows(corpus, grid, seed=seed, base=base, clean=clean)
    return rows


def encoding_rows(
    corpus: Corpus, grid: UtilityGrid, *, seed: int, base: dict[str, Any], clean: float
) -> list[dict[str, Any]]:
    """int8 (per-vector scale) and float32 sealed vectors against float16, at :attr:`UtilityGrid.encoding_probe`."""
    r, q, f = grid.encoding_probe
    rows = []
    for enc in ("float32", "int8"):
        sealed = SealedVectors.of(corpus.docs, encoding=enc)
        per_seed = []
        for s in grid.seeds:
            cand, _ = candidate_vectors(corpus.docs, mechanism="gaussian", strength=r, seed=seed + s + DOC_STREAM)
            per_seed.append(measure_config(corpus, cand, query_strength=q, seed=seed + s, fetch_ks=(f,), sealed=sealed))
        fields = {
            **base,
            "mechanism": "gaussian",
            "doc_strength": r,
            "query_strength": q,
            "encoding": enc,
            "n_seeds": len(grid.seeds),
        }
        rows += [{**row, "part": "encoding"} for row in seed_mean_rows(per_seed, fields, clean) if row["fetch_k"] == f]
    return rows
