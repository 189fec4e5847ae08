"""The scale grid's recall-target rows: candidate search in rounds with the core's stopping rule.

Each query asks the store (a FAISS flat scan of what it holds) for ``FIRST_ROUND`` records, then twice as many
each round, up to ``fetch_k``; after each round the core's :func:`~textcrafter_rag.sealed.rounds.rule_met`
decides from the exact cosines of the records read (int8 as sealed) and the store score of the round's last
record. The store scores are the flat scan's inner products over the un-rotated candidates, which are the
scores the application rebuilds from each record's sealed noise seed (``tests/test_candidate_rounds.py``
checks that rebuild on real sealed records). ``recall_vs_scan`` is the share of the top 10 that a full scan
of the sealed (int8) vectors ranks which the rounds found: the quantity the rule's target bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch
from textcrafter_rag.sealed.rounds import FIRST_ROUND, rule_met

__all__ = ["recall_rows", "rounds_of_query", "timed_ms"]


def rounds_of_query(
    scores: np.ndarray, exact: np.ndarray, *, size: int, search: TwoStageSearch, dim: int, k: int = 10
) -> tuple[int, list[int], bool]:
    """``(records read, round sizes, capped)`` for one query: ``scores`` the store's scores of its ranked answer,
    ``exact`` those records' exact cosines, both as long as the cap (or the store) allows."""
    assert search.recall is not None
    asked = min(search.open_k, max(FIRST_ROUND, k))
    sizes: list[int] = []
    while True:
        sizes.append(asked)
        returned = min(asked, size)
        if returned < asked:
            return returned, sizes, False
        lowest = float(scores[returned - 1])
        if rule_met(exact[:returned], lowest, k=k, recall=search.recall, search=search, dim=dim):
            return returned, sizes, False
        if asked >= search.open_k:
            return returned, sizes, True
        asked = min(search.open_k, 2 * asked)


def recall_rows(
    recalls: tuple[float, ...],
    *,
    cap: int,
    size: int,
    scores: np.ndarray,
    fetched: np.ndarray,
    sealed_cosines: Callable[[int, np.ndarray], np.ndarray],
    scan_top: np.ndarray,
    rerank_ndcg: Callable[[np.ndarray], float],
    timed: range,
    time_store: Callable[[int, int], float],
    time_app: Callable[[int, int], float],
    dim: int,
) -> list[dict[str, Any]]:
    """One partial row per recall target (``fetch_k`` = ``cap``): quality, records read, rounds, capped share, latency.

    Args:
        scores, fetched: The store's top ``cap`` per query (inner products, indices).
        sealed_cosines: ``(query, indices) -> exact cosines`` of those records' sealed (int8) vectors.
        scan_top: The top 10 of a full scan of the sealed vectors, per query.
        rerank_ndcg: NDCG@10 of the re-rank of fetched indices (``-1`` = not read).
        timed: The queries timed.
        time_store: Milliseconds of one store round for ``(query, k)``.
        time_app: Milliseconds of the app's work for ``(query, records read)``: open them, rebuild their store
            scores from the sealed seeds, rank.
    """
    rows: list[dict[str, Any]] = []
    for recall in recalls:
        search = TwoStageSearch(open_k=cap, recall=recall)
        read, n_rounds, capped, found = [], [], [], 0
        round_sizes: list[list[int]] = []
        limited = np.full_like(fetched, -1)
        for i in range(len(fetched)):
            n, sizes, cut = rounds_of_query(scores[i], sealed_cosines(i, fetched[i]), size=size, search=search, dim=dim)
            read.append(n)
            n_rounds.append(len(sizes))
            round_sizes.append(sizes)
            capped.append(cut)
            limited[i, :n] = fetched[i, :n]
            found += len(set(scan_top[i].tolist()) & set(fetched[i, :n].tolist()))
        store_ms = [sum(time_store(i, min(m, size)) for m in round_sizes[i]) for i in timed]
        app_ms = [time_app(i, read[i]) for i in timed]
        rows.append(
            {
                "setting": f"recall {recall} (fetch_k {cap})" + (" (shipped)" if search == DEFAULT_SEARCH else ""),
                "recall_target": recall,
                "fetch_k": cap,
                "opened": cap,
                "read": read,
                "rounds_p50": float(np.percentile(n_rounds, 50)),
                "rounds_p95": float(np.percentile(n_rounds, 95)),
                "capped_share": float(np.mean(capped)),
                "recall_vs_scan": found / (10 * len(fetched)),
                "ndcg10": rerank_ndcg(limited),
                "app_ms": app_ms,
                "store_ms": store_ms,
            }
        )
    return rows


def timed_ms(work: Callable[[], Any]) -> float:
    """Milliseconds ``work()`` takes (one call)."""
    t = time.perf_counter()
    work()
    return 1000 * (time.perf_counter() - t)
