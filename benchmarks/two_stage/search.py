"""Two-stage search as the sealed stores run it, on arrays: fetch by candidate vectors, re-rank by sealed clean ones.

Stage 1 is an exact inner-product search (``faiss.IndexFlatIP``) over the candidate vectors, which carry the
norm of the clean vectors (unit for MiniLM), so L2, inner-product and cosine stores would rank alike. Stage 2
re-ranks the ``fetch_k`` candidates by the exact cosine of their clean vectors as the store would hand them
back sealed: float16 (or int8 with a per-vector scale), decoded in the application.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from textcrafter_rag.metrics import retrieval_metrics

__all__ = [
    "SealedVectors",
    "StageOne",
    "evaluate_two_stage",
    "fetch_candidates",
    "int8_quantise",
    "int8_roundtrip",
    "ndcg_recall",
]


def int8_quantise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``x`` as int8 values and one float32 scale per row (max-abs / 127)."""
    x = np.asarray(x, dtype=np.float32)
    scale = (np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127.0).astype(np.float32)
    return np.round(x / scale).clip(-127, 127).astype(np.int8), scale


def int8_roundtrip(x: np.ndarray) -> np.ndarray:
    """``x`` stored as int8 with one float32 scale per vector (:func:`int8_quantise`) and decoded again."""
    q, scale = int8_quantise(x)
    return q.astype(np.float32) * scale


@dataclass(frozen=True)
class SealedVectors:
    """The clean document vectors as the application decodes them (float16 or int8), unit rows for cosine."""

    unit: np.ndarray
    encoding: str

    @classmethod
    def of(cls, clean: np.ndarray, *, encoding: str = "float16") -> SealedVectors:
        """Decode ``clean`` after a round trip through ``encoding`` (``float16``, ``int8`` or ``float32``)."""
        if encoding == "float16":
            dec = np.asarray(clean, dtype=np.float16).astype(np.float32)
        elif encoding == "int8":
            dec = int8_roundtrip(clean)
        elif encoding == "float32":
            dec = np.asarray(clean, dtype=np.float32)
        else:
            raise ValueError(f"unknown encoding {encoding!r}")
        return cls(unit=dec / np.maximum(np.linalg.norm(dec, axis=1, keepdims=True), 1e-12), encoding=encoding)


@dataclass(frozen=True)
class StageOne:
    """The ``max_k`` best candidates per query (row indices into the store), best first."""

    idx: np.ndarray


def fetch_candidates(candidate_docs: np.ndarray, candidate_queries: np.ndarray, *, max_k: int) -> StageOne:
    """Stage 1: the ``max_k`` documents of highest inner product with each (protected) query."""
    index = faiss.IndexFlatIP(candidate_docs.shape[1])
    step = 100_000
    for i in range(0, len(candidate_docs), step):
        index.add(np.ascontiguousarray(candidate_docs[i : i + step], dtype=np.float32))
    _, idx = index.search(np.ascontiguousarray(candidate_queries, dtype=np.float32), min(max_k, len(candidate_docs)))
    return StageOne(idx=idx)


def ndcg_recall(
    ranked_idx: np.ndarray, doc_ids: Sequence[str], query_ids: Sequence[str], qrels: dict[str, set[str]], *, k: int
) -> tuple[float, float]:
    """``(NDCG@10, recall@k)`` in percent of rankings given as row indices (``-1`` = no hit)."""
    ranked = {q: [doc_ids[j] for j in row if j >= 0] for q, row in zip(query_ids, ranked_idx)}
    ks = sorted({10, k})
    m = retrieval_metrics(ranked, qrels, ks=ks)
    return float(m["ndcg@10"]), float(m[f"recall@{k}"])


def evaluate_two_stage(
    stage: StageOne,
    sealed: SealedVectors,
    clean_queries: np.ndarray,
    *,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    qrels: dict[str, set[str]],
    fetch_ks: Sequence[int],
) -> dict[int, dict[str, float]]:
    """Per ``fetch_k``: end-to-end NDCG@10 (re-ranked top 10) and recall@fetch_k of the fetched candidates.

    ``fetch_k = 10`` without re-ranking is the single-stage search (reported as ``single_stage_ndcg10``).
    """
    q = np.asarray(clean_queries, dtype=np.float32)
    q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    idx = stage.idx
    # exact cosine of every fetched candidate with its clean query (the sealed vectors, decoded)
    scores = np.empty(idx.shape, dtype=np.float32)
    for i in range(0, len(idx), 32):  # chunks bound the gathered (queries, fetch_k, dim) block
        block = sealed.unit[np.maximum(idx[i : i + 32], 0)]
        scores[i : i + 32] = np.einsum("qkd,qd->qk", block, q[i : i + 32])
    scores[idx < 0] = -np.inf
    out: dict[int, dict[str, float]] = {}
    single, _ = ndcg_recall(idx[:, :10], doc_ids, query_ids, qrels, k=10)
    for f in fetch_ks:
        f_eff = min(f, idx.shape[1])
        order = np.argsort(-scores[:, :f_eff], axis=1, kind="stable")[:, :10]
        top = np.take_along_axis(idx[:, :f_eff], order, axis=1)
        ndcg, _ = ndcg_recall(top, doc_ids, query_ids, qrels, k=10)
        _, recall = ndcg_recall(idx[:, :f_eff], doc_ids, query_ids, qrels, k=f_eff)
        out[f] = {"ndcg10": ndcg, "recall_at_fetch_k": recall, "single_stage_ndcg10": single}
    return out
