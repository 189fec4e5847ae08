"""Fitted distractors for the scale grid: more records that keep SciFact's cluster structure (or one Gaussian).

See :mod:`benchmarks.sealed_search.scale` for why the clustered kind is the default and how it was checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import faiss
import numpy as np

from textcrafter_rag.data import load_classification, wikitext_sentences
from textcrafter_rag.numerics import unit_rows

__all__ = [
    "CHUNK",
    "REAL_SOURCES",
    "cluster_distractor_chunks",
    "cluster_distractors",
    "real_sentences",
    "distractor_check",
    "gaussian_distractors",
]

_PARENTS = 6  # residuals mixed per distractor
#: Rows generated (and, in the scale grid, searched or added) per step: bounded memory at a million records.
CHUNK = 50_000


def _unit32(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64)).astype(np.float32)


def cluster_distractor_chunks(docs: np.ndarray, n: int, *, n_clusters: int, seed: int) -> Iterator[np.ndarray]:
    """``n`` unit vectors in the clusters of ``docs`` (see the module docstring), :data:`CHUNK` rows at a time."""
    x = _unit32(docs)
    d = x.shape[1]
    k = max(1, min(n_clusters, len(x) // 8))
    km = faiss.Kmeans(d, k, niter=25, seed=seed + 11, verbose=False)
    km.train(x)
    _, assign = km.index.search(x, 1)
    assign = assign[:, 0]
    members = [np.flatnonzero(assign == c) for c in range(k)]
    sizes = np.asarray([len(m) for m in members], dtype=np.float64)
    centroids = np.stack([x[m].mean(axis=0) if len(m) else km.centroids[c] for c, m in enumerate(members)])
    resid = x - centroids[assign]
    spread = np.stack([resid[m].std(axis=0) if len(m) > 1 else np.full(d, resid.std()) for m in members])
    rng = np.random.default_rng(seed + 13)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        c = rng.choice(k, size=m, p=sizes / sizes.sum())
        pick = np.stack([members[ci][rng.integers(len(members[ci]), size=_PARENTS)] for ci in c])
        w = rng.choice(np.asarray([-1.0, 1.0], dtype=np.float32), size=(m, _PARENTS)) / np.float32(np.sqrt(_PARENTS))
        mix = np.einsum("mj,mjd->md", w, resid[pick])
        jitter = 0.25 * spread[c] * rng.standard_normal((m, d)).astype(np.float32)
        yield _unit32(centroids[c] + mix + jitter)


def cluster_distractors(docs: np.ndarray, n: int, *, n_clusters: int, seed: int) -> np.ndarray:
    """``n`` unit vectors in the clusters of ``docs`` (see the module docstring), in one array."""
    out = np.empty((n, np.asarray(docs).shape[1]), dtype=np.float32)
    start = 0
    for chunk in cluster_distractor_chunks(docs, n, n_clusters=n_clusters, seed=seed):
        out[start : start + len(chunk)] = chunk
        start += len(chunk)
    return out


def gaussian_distractors(docs: np.ndarray, n: int, *, seed: int) -> np.ndarray:
    """``n`` unit vectors from the one Gaussian fitted to ``docs`` (mean and full covariance)."""
    rng = np.random.default_rng(seed + 7)
    x = np.asarray(docs, dtype=np.float64)
    chol = np.linalg.cholesky(np.cov(x, rowvar=False) + 1e-8 * np.eye(x.shape[1])).astype(np.float32)
    mean = x.mean(axis=0).astype(np.float32)
    out = np.empty((n, x.shape[1]), dtype=np.float32)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        out[start : start + m] = _unit32(mean + rng.standard_normal((m, x.shape[1]), dtype=np.float32) @ chol.T)
    return out


def distractor_check(docs: np.ndarray, distractors: np.ndarray, *, n: int = 2000, seed: int = 0) -> dict[str, float]:
    """How close distractors sit to the real documents: mean best cosine to a real document, against the real
    documents' own mean best cosine to another real document (neither near-copies nor out of domain)."""
    x = _unit32(docs)
    rng = np.random.default_rng(seed)
    real = x[rng.choice(len(x), min(n, len(x)), replace=False)]
    fake = distractors[rng.choice(len(distractors), min(n, len(distractors)), replace=False)]
    sim_real = real @ x.T
    sim_real[sim_real > 0.99999] = -1.0  # itself
    return {
        "real_nn_cosine_mean": float(sim_real.max(axis=1).mean()),
        "distractor_nn_cosine_mean": float((fake @ x.T).max(axis=1).mean()),
        "distractor_nn_cosine_p99": float(np.percentile((fake @ x.T).max(axis=1), 99)),
    }


#: The real public sentences of the ``real`` kind: every split of the shared datasets other than SciFact.
REAL_SOURCES = "WikiText-2 sentences, SST-2, ADE, AG News and Financial PhraseBank (all splits)"


def real_sentences(n: int, *, data_dir: str | os.PathLike[str] | None, seed: int) -> list[str]:
    """``n`` distinct real sentences of :data:`REAL_SOURCES` (fewer if they hold fewer), in a seeded order.

    Out of SciFact's domain: what a store that mixes a project's documents with others looks like, and the
    kind issue 29's 155,000-record row measured (the fitted distractors stay the harder, same-domain case).
    """
    texts: list[str] = []
    for split in ("train", "valid", "test"):
        texts += wikitext_sentences(split, data_dir=data_dir)
    for name in ("sst2", "ade", "ag_news", "financial_phrasebank"):
        for split in ("train", "test"):
            texts += load_classification(name, split, data_dir=data_dir)[0]
    unique = sorted({t for t in texts if t})
    order = np.random.default_rng(seed + 23).permutation(len(unique))
    return [unique[i] for i in order[:n]]
