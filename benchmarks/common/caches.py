"""Cached benchmark inputs: the cache folder, cache keys, and clean embeddings of the datasets.

Embedding SciFact or the classification sets takes minutes on 2 cores and is deterministic, so it
is done once: :func:`embed_cached` stores the vectors with the core's
:func:`textcrafter_rag.embedding.cached_embeddings` (keyed by encoder id and texts) and, for a
subsample, reuses the rows of a cached superset (a quick run slices the full run's embeddings).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textcrafter_rag.embedding import cached_embeddings, texts_hash

__all__ = ["cache_dir", "cache_key", "embed_cached", "embedding_file"]


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The benchmark cache folder (created): ``path``, ``$TEXTCRAFTER_BENCH_CACHE`` or ``~/.cache/.../bench``."""
    default = Path.home() / ".cache" / "textcrafter_rag" / "bench"
    root = Path(path or os.environ.get("TEXTCRAFTER_BENCH_CACHE") or default)
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_key(*parts: Any) -> str:
    """A short hash of ``parts`` (lists element by element): a key holds everything its cached item depends on."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (list, tuple)):
            for t in p:
                h.update(str(t).encode("utf-8"))
                h.update(b"\x00")
        else:
            h.update(str(p).encode("utf-8"))
        h.update(b"\x01")
    return h.hexdigest()[:20]


def embedding_file(encoder: Any, texts: Sequence[str], *, cache: Path) -> Path:
    """Where :func:`~textcrafter_rag.embedding.cached_embeddings` keeps the embeddings of ``texts`` in ``cache``.

    Only used to ask whether a superset is cached without embedding it; the smoke tests check that
    this matches the file the core helper writes.
    """
    key = hashlib.sha256(f"{getattr(encoder, 'model_id', '?')}|{texts_hash(texts)}".encode()).hexdigest()[:20]
    return cache / f"emb-{key}.npy"


def embed_cached(
    encoder: Any,
    texts: Sequence[str],
    *,
    cache: Path,
    desc: str = "Embedding",
    progress: bool = True,
    superset: Sequence[str] | None = None,
) -> np.ndarray:
    """``encoder.encode(texts)`` as float32, cached on disk.

    Args:
        encoder: An :class:`~textcrafter_rag.encoders.Encoder` (its ``model_id`` is part of the key).
        texts: The texts to embed.
        cache: The cache folder.
        desc: Progress-bar label.
        progress: Show a progress bar.
        superset: A larger text list ``texts`` was drawn from; if its embeddings are cached, the rows
            are taken from there instead of encoding again.
    """
    if superset is not None and not embedding_file(encoder, texts, cache=cache).is_file():
        sup = embedding_file(encoder, superset, cache=cache)
        pos = {t: i for i, t in enumerate(superset)}
        if sup.is_file() and all(t in pos for t in texts):
            return np.load(sup, allow_pickle=False)[[pos[t] for t in texts]]
    return cached_embeddings(encoder, texts, cache_dir=cache, progress=progress, desc=desc)
