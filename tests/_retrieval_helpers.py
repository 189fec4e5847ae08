"""Synthetic retrieval data for the benchmarks' smoke tests: no dataset, no model.

Five clusters of documents; each query is a noisy copy of one document, its only relevant one.
"""

from __future__ import annotations

import numpy as np

from benchmarks.sealed_search.store_index_parts import Retrieval

DIM = 32


def synthetic_retrieval(*, n_docs: int, n_queries: int = 12, seed: int = 0, dim: int = DIM) -> Retrieval:
    """``n_docs`` clustered unit documents and ``n_queries`` queries, each near one document."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((5, dim))
    docs = centers[rng.integers(5, size=n_docs)] + 0.6 * rng.standard_normal((n_docs, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    rel = rng.choice(n_docs, n_queries, replace=False)
    queries = docs[rel] + 0.2 * rng.standard_normal((n_queries, dim))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
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
