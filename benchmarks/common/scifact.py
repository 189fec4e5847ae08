"""The SciFact retrieval set as the benchmarks measure it: subsamples, FAISS indexes, NDCG@10, abstract sentences.

Shared by the retrieval study, the privacy frontier (its NDCG@10 bisection and SciFact victims) and the
threat-model matrix, so that all of them score retrieval and pick "SciFact sentences" the same way.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import faiss
import numpy as np

from textcrafter_rag.data import RetrievalSet, load_scifact, split_sentences
from textcrafter_rag.metrics import retrieval_metrics

from .caches import embed_cached

__all__ = [
    "EmbeddedSciFact",
    "IndexConfig",
    "abstract_sentences",
    "build_index",
    "embedded_scifact",
    "ndcg10_flat",
    "search",
    "subsample",
]


@dataclass(frozen=True)
class IndexConfig:
    """The HNSW index's settings (the flat index has none)."""

    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128

    def describe(self) -> dict[str, str]:
        """The indexes as recorded in the results ``meta``."""
        hnsw = (
            f"faiss.IndexHNSWFlat(M={self.hnsw_m}, METRIC_INNER_PRODUCT, "
            f"efConstruction={self.ef_construction}, efSearch={self.ef_search})"
        )
        return {
            "flat": "faiss.IndexFlatIP",
            "hnsw": hnsw,
            "similarity": "inner product on the released vectors (no re-normalisation)",
        }


def subsample(rs: RetrievalSet, *, n_queries: int, n_docs: int, seed: int) -> RetrievalSet:
    """A smaller retrieval set: ``n_queries`` queries, all their relevant docs, and random other docs."""
    rng = random.Random(seed)
    qidx = list(range(len(rs.query_ids)))
    if n_queries and n_queries < len(qidx):
        qidx = sorted(rng.sample(qidx, n_queries))
    qids = [rs.query_ids[i] for i in qidx]
    if not n_docs or n_docs >= len(rs.doc_ids):
        didx = list(range(len(rs.doc_ids)))
    else:
        pos = {d: i for i, d in enumerate(rs.doc_ids)}
        rel = sorted({pos[d] for q in qids for d in rs.qrels[q] if d in pos})
        others = [i for i in range(len(rs.doc_ids)) if i not in set(rel)]
        didx = sorted(rel + rng.sample(others, max(0, n_docs - len(rel))))
    return RetrievalSet(
        doc_ids=[rs.doc_ids[i] for i in didx],
        docs=[rs.docs[i] for i in didx],
        query_ids=qids,
        queries=[rs.queries[i] for i in qidx],
        qrels={q: rs.qrels[q] for q in qids},
    )


def build_index(kind: str, vectors: np.ndarray, *, config: IndexConfig) -> Any:
    """An inner-product FAISS index (``flat`` or ``hnsw``) holding ``vectors``."""
    d = vectors.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    else:
        index = faiss.IndexHNSWFlat(d, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        index.hnsw.efSearch = config.ef_search
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def search(index: Any, queries: np.ndarray, doc_ids: list[str], query_ids: list[str], k: int) -> dict[str, list[str]]:
    """Ranked doc ids per query id."""
    _, idx = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(doc_ids)))
    return {q: [doc_ids[j] for j in row if j >= 0] for q, row in zip(query_ids, idx)}


def ndcg10_flat(docs: np.ndarray, queries: np.ndarray, rs: RetrievalSet) -> float:
    """NDCG@10 (percent) of ``queries`` against ``docs`` (rows of ``rs``) in an exact inner-product index."""
    ranked = search(build_index("flat", docs, config=IndexConfig()), queries, rs.doc_ids, rs.query_ids, 10)
    return float(retrieval_metrics(ranked, rs.qrels, ks=(10,))["ndcg@10"])


def abstract_sentences(doc: str, *, min_words: int = 5, max_words: int = 40) -> list[str]:
    """The sentences of a SciFact document's abstract (its title, up to the first ". ", dropped) of
    ``min_words``..``max_words`` words: what the privacy benchmarks attack as "SciFact sentences"."""
    return [s for s in split_sentences(doc.split(". ", 1)[-1]) if min_words <= len(s.split()) <= max_words]


class EmbeddedSciFact(NamedTuple):
    """SciFact (``full``), the run's subsample (``rs``) and the clean embeddings of its docs and queries."""

    full: RetrievalSet
    rs: RetrievalSet
    docs: np.ndarray
    queries: np.ndarray


def embedded_scifact(
    encoder: Any, args: argparse.Namespace, n_queries: int, n_docs: int, *, data_dir: Path, cache: Path
) -> EmbeddedSciFact:
    """SciFact subsampled (:func:`subsample`, with ``--seed``) and embedded, sliced from the cached embeddings
    of the whole set (``n_queries`` / ``n_docs`` 0: all)."""
    progress = not args.no_progress
    full = load_scifact(data_dir=data_dir)
    rs = subsample(full, n_queries=n_queries, n_docs=n_docs, seed=args.seed)
    docs = embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress, superset=full.docs)
    queries = embed_cached(
        encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress, superset=full.queries
    )
    return EmbeddedSciFact(full, rs, docs, queries)
