"""Scale: SciFact grown by distractor records, to see how ``fetch_k`` must grow with the store.

Distractors (never relevant to a query) are made two ways:

* ``gaussian-fit`` (synthetic, same-domain-ish): draws from a Gaussian with the mean and covariance of the
  SciFact document embeddings, normalised to unit length. Cheap at any size (used for 500,000).
* ``wikitext2`` (real, out-of-domain): MiniLM embeddings of the WikiText-2 train sentences that fit the
  inverter (about 34,600; the attack cache embeds them for a clean inverter anyway). Real text cost ~10-30
  embeddings/s on this run's crowded 2 cores, so the real store stops at SciFact plus those sentences.

The clean reference at each size is the clean search of the grown store (what re-ranking everything gives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from textcrafter_rag.attacks import Inverter
from textcrafter_rag.attacks.cache import cache_root
from textcrafter_rag.attacks.inverter_model import InverterConfig
from textcrafter_rag.data import wikitext_sentences
from textcrafter_rag.embedding import cached_embeddings

from .candidates import candidate_vectors, unit_rows32
from .search import SealedVectors
from .utility import DOC_STREAM, Corpus, clean_ndcg10, measure_config, seed_mean_rows

__all__ = ["DISTRACTOR_KINDS", "ScaleGrid", "gaussian_fit_distractors", "grown", "scale_rows", "wikitext_distractors"]

DISTRACTOR_KINDS = ("gaussian-fit", "wikitext2")


@dataclass(frozen=True)
class ScaleGrid:
    """What the scale part measures: ``(kind, total records)`` stores and the grid run on each."""

    stores: tuple[tuple[str, int], ...]
    doc_strengths: tuple[float, ...]
    query_strengths: tuple[float | None, ...]
    fetch_ks: tuple[int, ...]
    seeds: tuple[int, ...]


def gaussian_fit_distractors(docs: np.ndarray, n: int, *, seed: int) -> np.ndarray:
    """``n`` unit vectors drawn from the Gaussian fitted to ``docs`` (mean and full covariance)."""
    rng = np.random.default_rng(seed + 7)
    mean = docs.mean(axis=0).astype(np.float64)
    cov = np.cov(docs.astype(np.float64), rowvar=False) + 1e-8 * np.eye(docs.shape[1])
    chol = np.linalg.cholesky(cov).astype(np.float32)
    out = np.empty((n, docs.shape[1]), dtype=np.float32)
    for i in range(0, n, 50_000):
        m = min(50_000, n - i)
        out[i : i + m] = unit_rows32(
            mean.astype(np.float32) + rng.standard_normal((m, docs.shape[1]), dtype=np.float32) @ chol.T
        )
    return out


def wikitext_distractors(encoder: Any, data_dir: Any, *, n: int | None, progress: bool) -> np.ndarray:
    """MiniLM embeddings of the first ``n`` (``None``: all) WikiText-2 train sentences that fit the inverter (the
    texts a clean inverter trains on, so the attack cache's embeddings are reused)."""
    texts = wikitext_sentences("train", data_dir=data_dir)[:n]
    lengths = Inverter.token_lengths(list(texts), encoder.model.tokenizer)
    fits = [t for t, n in zip(texts, lengths) if n <= InverterConfig().max_len]
    return cached_embeddings(encoder, fits, cache_dir=cache_root(None), progress=progress, desc="WikiText-2")


def grown(corpus: Corpus, distractors: np.ndarray) -> Corpus:
    """``corpus`` plus ``distractors`` as extra, never relevant, documents."""
    ids = corpus.doc_ids + [f"distractor-{i}" for i in range(len(distractors))]
    return Corpus(
        doc_ids=ids,
        query_ids=corpus.query_ids,
        qrels=corpus.qrels,
        docs=np.concatenate([corpus.docs, distractors.astype(np.float32)]),
        queries=corpus.queries,
    )


def scale_rows(
    corpus: Corpus, grid: ScaleGrid, *, distractors: dict[str, np.ndarray], seed: int, progress: bool
) -> list[dict[str, Any]]:
    """Clean and two-stage rows for every grown store of ``grid``."""
    rows: list[dict[str, Any]] = []
    for kind, total in tqdm(grid.stores, desc="Scale", disable=not progress):
        pool = distractors[kind]
        store = grown(corpus, pool[: max(0, total - corpus.n_docs)])
        clean = clean_ndcg10(store)
        base = {"part": "scale", "n_docs": store.n_docs, "distractors": kind, "clean_ndcg10": clean}
        rows.append(
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
        )
        sealed = SealedVectors.of(store.docs, encoding="float16")
        for r in grid.doc_strengths:
            per_q: dict[float | None, list[dict[int, dict[str, float]]]] = {q: [] for q in grid.query_strengths}
            for s in grid.seeds:
                cand, _ = candidate_vectors(store.docs, mechanism="gaussian", strength=r, seed=seed + s + DOC_STREAM)
                for q in grid.query_strengths:
                    per_q[q].append(
                        measure_config(
                            store, cand, query_strength=q, seed=seed + s, fetch_ks=grid.fetch_ks, sealed=sealed
                        )
                    )
                del cand
            for q, per_seed in per_q.items():
                fields = {
                    **base,
                    "mechanism": "gaussian",
                    "doc_strength": r,
                    "query_strength": q,
                    "encoding": "float16",
                    "n_seeds": len(grid.seeds),
                }
                rows += seed_mean_rows(per_seed, fields, clean)
    return rows
