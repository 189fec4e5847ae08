"""Synthetic retrieval data for the benchmarks' smoke tests: no dataset, no model.

Five clusters of documents; each query is a noisy copy of one document, its only relevant one.
"""

from __future__ import annotations

import numpy as np

from benchmarks.sealed_search.store_index_parts import Retrieval

DIM = 32


def clustered_vectors(
    rng: np.random.Generator, *, n_docs: int, n_queries: int, dim: int, centers: int, query_noise: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit documents around ``centers`` cluster centres, and unit queries each near one document (``rel``)."""
    middles = rng.standard_normal((centers, dim))
    docs = middles[rng.integers(centers, size=n_docs)] + 0.6 * rng.standard_normal((n_docs, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    rel = rng.choice(n_docs, n_queries, replace=False)
    queries = docs[rel] + query_noise * rng.standard_normal((n_queries, dim))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return docs, queries, rel


def synthetic_retrieval(*, n_docs: int, n_queries: int = 12, seed: int = 0, dim: int = DIM) -> Retrieval:
    """``n_docs`` clustered unit documents and ``n_queries`` queries, each near one document."""
    docs, queries, rel = clustered_vectors(
        np.random.default_rng(seed), n_docs=n_docs, n_queries=n_queries, dim=dim, centers=5, query_noise=0.2
    )
    doc_ids = [f"d{i}" for i in range(n_docs)]
    query_ids = [f"q{i}" for i in range(n_queries)]
    return Retrieval(
        doc_ids,
        [f"document {i} about topic {i % 5}" for i in range(n_docs)],
        docs.astype(np.float32),
        query_ids,
        [f"question {i}" for i in range(n_queries)],
        queries.astype(np.float32),
        {q: {doc_ids[r]} for q, r in zip(query_ids, rel)},
        f"synthetic: {n_docs} documents",
    )
