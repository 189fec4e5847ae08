"""The averaging attack: a store that receives ``n`` protections of one record averages them.

Without a key, every re-protection (re-indexing, an update, a second store, a backup) is an independent
draw, and the mean of ``n`` draws sits closer to the clean vector. Per strength and ``n`` the rows give
``cos(mean, clean)``, the single-draw strength with the same cosine (``1/cos = sqrt(1 + r^2)`` for a unit
vector and an orthogonal direction), how often the mean's nearest clean SciFact document is its own
(``identified_top1``), and the single-stage NDCG@10 of a store holding the means.

With a key the sealed stores derive the direction from a keyed PRF of (tenant, record id, text): the ``n``
copies are then identical and their mean is the single draw. ``keyed`` rows measure that through the
core's own keyed derivation when it provides one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .candidates import candidate_vectors, unit_rows32
from .search import fetch_candidates, ndcg_recall
from .utility import DOC_STREAM, Corpus

__all__ = ["averaging_rows", "equivalent_strength"]


def equivalent_strength(cosine: float) -> float:
    """The strength ``r`` of one draw whose candidate has cosine ``cosine`` with a unit clean vector."""
    c = min(max(cosine, 1e-9), 1.0)
    return float(np.sqrt(max(1.0 / (c * c) - 1.0, 0.0)))


def _measures(corpus: Corpus, stored: np.ndarray) -> dict[str, float]:
    x = unit_rows32(corpus.docs)
    m = unit_rows32(stored)
    cos = float(np.sum(x * m, axis=1).mean())
    top1 = []
    for i in range(0, len(m), 1024):
        sims = m[i : i + 1024] @ x.T
        top1.append(np.argmax(sims, axis=1) == np.arange(i, i + len(sims)))
    stage = fetch_candidates(m, corpus.queries, max_k=10)
    ndcg, _ = ndcg_recall(stage.idx, corpus.doc_ids, corpus.query_ids, corpus.qrels, k=10)
    return {
        "cosine_to_clean": cos,
        "equivalent_strength": equivalent_strength(cos),
        "identified_top1": 100.0 * float(np.concatenate(top1).mean()),
        "ndcg10": ndcg,
    }


def averaging_rows(
    corpus: Corpus,
    *,
    strengths: Sequence[float],
    copies: Sequence[int],
    seed: int,
    keyed: Callable[[np.ndarray, float], np.ndarray] | None = None,
    keyed_about: str = "",
) -> list[dict[str, Any]]:
    """Rows for independent draws and, when ``keyed`` (``(docs, r) -> candidates``, deterministic) is given,
    for keyed re-protection."""
    rows: list[dict[str, Any]] = []
    base = {"part": "averaging", "mechanism": "gaussian", "n_docs": corpus.n_docs, "query_strength": None}
    for r in strengths:
        draws = [
            candidate_vectors(corpus.docs, mechanism="gaussian", strength=r, seed=seed + DOC_STREAM + 10_000 + i)[0]
            for i in range(max(copies))
        ]
        for n in copies:
            mean = np.mean(draws[:n], axis=0)
            rows.append({**base, "doc_strength": r, "copies": n, "draws": "independent", **_measures(corpus, mean)})
        if keyed is not None:
            copies_k = [keyed(corpus.docs, r) for _ in range(max(copies))]
            for n in copies:
                mean = np.mean(copies_k[:n], axis=0)
                identical = bool(all(np.array_equal(copies_k[0], c) for c in copies_k[:n]))
                rows.append(
                    {
                        **base,
                        "doc_strength": r,
                        "copies": n,
                        "draws": "keyed",
                        "copies_identical": identical,
                        "keyed_derivation": keyed_about,
                        **_measures(corpus, mean),
                    }
                )
    return rows
