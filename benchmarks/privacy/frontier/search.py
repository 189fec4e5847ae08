"""Where each mechanism keeps a given share of clean retrieval: NDCG@10 on SciFact and a cached bisection.

:class:`RetrievalProbe` measures SciFact NDCG@10 with clean queries against protected documents in
an exact ``IndexFlatIP``. :func:`bisect_strength` finds the strength ``t`` at which NDCG@10 is a
target share of clean by bisection on ``log t``; the mechanism is rebuilt with the same seed at
every step (common random numbers), so each document moves along the same noise draw and NDCG@10
is a deterministic, in practice monotone, function of ``t``. :func:`find_point` caches the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_key
from benchmarks.common.grid import perturbation_norm
from benchmarks.common.reporting import clean_json
from benchmarks.common.scifact import ndcg10_flat
from textcrafter_rag.attacks.cache import defense_key
from textcrafter_rag.data import RetrievalSet
from textcrafter_rag.mechanisms import Mechanism

from .candidates import Candidate, FrontierContext

__all__ = ["FrontierPoint", "RetrievalProbe", "SearchConfig", "bisect_strength", "find_point"]


@dataclass(frozen=True)
class RetrievalProbe:
    """SciFact with its clean embeddings: NDCG@10 of protected documents searched with clean queries.

    Attributes:
        rs: The retrieval set (documents, queries, relevance judgements).
        docs: Clean document embeddings, one row per ``rs.docs``.
        queries: Clean query embeddings, one row per ``rs.queries``.
    """

    rs: RetrievalSet
    docs: np.ndarray
    queries: np.ndarray

    def ndcg(self, docs: np.ndarray) -> float:
        """NDCG@10 (percent) of ``docs`` (released document vectors) in an exact inner-product index."""
        return ndcg10_flat(docs, self.queries, self.rs)

    def clean_ndcg(self) -> float:
        """NDCG@10 without a defense."""
        return self.ndcg(self.docs)

    def measure(self, mechanism: Mechanism) -> tuple[float, float]:
        """``(NDCG@10, mean ‖x'−x‖)`` of the documents released by ``mechanism``."""
        released = mechanism.protect(self.docs)
        return self.ndcg(released), perturbation_norm(self.docs, released)

    def key(self) -> str:
        """Identity of the corpus, queries and judgements, for cache keys."""
        return cache_key(self.rs.doc_ids, self.rs.query_ids, len(self.docs), float(np.sum(self.docs[:64])))


@dataclass(frozen=True)
class SearchConfig:
    """When the bisection stops: ``|NDCG/clean - target| <= tolerance`` or ``max_iter`` evaluations inside."""

    tolerance: float = 0.005
    max_iter: int = 12

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1 or self.max_iter < 1:
            raise ValueError(f"need 0 < tolerance < 1 and max_iter >= 1, got {self}")


@dataclass(frozen=True)
class FrontierPoint:
    """A mechanism at the strength where its NDCG@10 is (closest to) ``target`` of clean.

    ``hit`` says whether ``|ratio - target| <= tolerance``; ``history`` lists every ``[t, ratio]`` tried.
    """

    mechanism: str
    target: float
    strength: float
    strength_name: str
    ndcg10: float
    ratio: float
    perturbation_norm: float
    hit: bool
    evaluations: int
    tolerance: float
    history: list[list[float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (for the cache and the results ``meta``)."""
        return asdict(self)


def bisect_strength(
    ratio_at: Callable[[float], float],
    *,
    target: float,
    bracket: tuple[float, float],
    falls: bool = True,
    config: SearchConfig | None = None,
) -> tuple[float, list[list[float]]]:
    """The ``t`` in ``bracket`` whose ``ratio_at(t)`` is closest to ``target`` found by bisection on ``log t``.

    Args:
        ratio_at: ``t -> NDCG/clean`` (deterministic).
        target: The wanted ratio.
        bracket: ``(low, high)``, both > 0.
        falls: Whether ``ratio_at`` falls as ``t`` grows.
        config: Tolerance and the cap on evaluations inside the bracket.

    Returns:
        ``(t, history)``: the best ``t`` tried and every ``[t, ratio]`` evaluated (ends of the bracket
        first). When the target lies outside the bracket's ratios, the nearer end is returned.
    """
    config = config or SearchConfig()
    lo, hi = bracket
    if not 0 < lo < hi:
        raise ValueError(f"the bracket must satisfy 0 < low < high, got {bracket}")
    history = [[lo, ratio_at(lo)], [hi, ratio_at(hi)]]

    def err(item: list[float]) -> float:
        return abs(item[1] - target)

    inside = min(history[0][1], history[1][1]) <= target <= max(history[0][1], history[1][1])
    if inside and min(map(err, history)) > config.tolerance:
        for _ in range(config.max_iter):
            mid = math.sqrt(lo * hi)
            r = ratio_at(mid)
            history.append([mid, r])
            if abs(r - target) <= config.tolerance:
                break
            if (r > target) == falls:
                lo = mid  # still too much retrieval (falls) or too little (rises): go stronger / weaker
            else:
                hi = mid
    best = min(history, key=err)
    return best[0], history


def _point_file(cache: Path, key: str) -> Path:
    return cache / "frontier" / "points" / f"{key}.json"


def find_point(
    candidate: Candidate,
    target: float,
    *,
    probe: RetrievalProbe,
    ctx: FrontierContext,
    seed: int,
    config: SearchConfig,
    cache: Path,
) -> FrontierPoint:
    """``candidate`` at ``target`` of clean NDCG@10, by :func:`bisect_strength`; cached in ``cache``.

    The cache key holds the candidate (name, version, and the identity of its mechanism at the
    bracket's low end: spec, parameters and any policy weights), the target, the search settings,
    the seed and the retrieval data.
    """
    lo_mech = candidate.mechanism(candidate.bracket[0], seed=seed, ctx=ctx)
    key = cache_key(
        "frontier-point-v1",
        candidate.name,
        candidate.version,
        candidate.bracket,
        candidate.ndcg_falls,
        defense_key(lo_mech),
        target,
        config.tolerance,
        config.max_iter,
        seed,
        probe.key(),
    )
    path = _point_file(cache, key)
    if path.is_file():
        return FrontierPoint(**json.loads(path.read_text(encoding="utf-8")))
    clean = probe.clean_ndcg()
    if clean <= 0:
        raise ValueError("clean NDCG@10 is 0: nothing to keep a share of")
    measured: dict[float, tuple[float, float]] = {}

    def ratio_at(t: float) -> float:
        measured[t] = probe.measure(candidate.mechanism(t, seed=seed, ctx=ctx))
        return measured[t][0] / clean

    t, history = bisect_strength(
        ratio_at, target=target, bracket=candidate.bracket, falls=candidate.ndcg_falls, config=config
    )
    ndcg, norm = measured[t]
    point = FrontierPoint(
        mechanism=candidate.name,
        target=target,
        strength=t,
        strength_name=candidate.strength,
        ndcg10=ndcg,
        ratio=ndcg / clean,
        perturbation_norm=norm,
        hit=abs(ndcg / clean - target) <= config.tolerance,
        evaluations=len(history),
        tolerance=config.tolerance,
        history=history,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean_json(point.as_dict())), encoding="utf-8")
    return point
