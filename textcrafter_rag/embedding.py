"""Embed many texts in batches, with a progress bar, optionally cached on disk.

:func:`embed_in_batches` is the one batching loop of the package; :func:`cached_embeddings`
adds a resumable on-disk cache (one ``.npy`` per batch while it runs, one ``.npy`` at the end)
keyed by the encoder's id and a hash of the texts. Use the cache only for public corpora:
never for a store owner's texts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .errors import InvalidInputError

__all__ = ["embed_in_batches", "cached_embeddings", "texts_hash"]

EncodeFn = Callable[[list[str]], Any]


def texts_hash(texts: Sequence[str]) -> str:
    """SHA-256 of a text list (order-sensitive)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def embed_in_batches(
    encode: EncodeFn,
    texts: Sequence[str],
    *,
    batch_size: int = 256,
    progress: bool = True,
    desc: str = "Embedding",
    batch_dir: Path | None = None,
) -> np.ndarray:
    """``encode`` over ``texts`` in batches; returns a float32 ``(n, D)`` array.

    Args:
        encode: ``list[str] -> array (n, D)`` (an :class:`~textcrafter_rag.encoders.Encoder`'s ``encode``).
        texts: The texts (at least one).
        batch_size: Texts per call.
        progress: Show a progress bar (hidden for a single batch).
        desc: The progress bar's label.
        batch_dir: If given, each finished batch is saved there and reused on a rerun (resumable).
    """
    if not len(texts):
        raise InvalidInputError("no texts to embed")
    starts = range(0, len(texts), batch_size)
    parts = []
    for i, s in enumerate(tqdm(starts, desc=desc, disable=not progress or len(starts) <= 1)):
        done = batch_dir / f"{i:06d}.npy" if batch_dir is not None else None
        if done is not None and done.is_file():
            parts.append(np.load(done, allow_pickle=False))
            continue
        part = np.asarray(encode(list(texts[s : s + batch_size])), dtype=np.float32)
        if done is not None:
            tmp = batch_dir / f"{i:06d}.tmp.npy"
            np.save(tmp, part, allow_pickle=False)
            tmp.replace(done)
        parts.append(part)
    return np.concatenate(parts, axis=0)


def cached_embeddings(
    encoder: Any,
    texts: Sequence[str],
    *,
    cache_dir: str | os.PathLike[str],
    batch_size: int = 1024,
    progress: bool = True,
    desc: str = "Embedding",
) -> np.ndarray:
    """``encoder.encode(texts)``, cached as ``emb-<key>.npy`` in ``cache_dir`` (resumable batch by batch).

    The key hashes the encoder's ``model_id`` and the texts, so a changed corpus or encoder never
    reuses a stale file.
    """
    key = hashlib.sha256(f"{getattr(encoder, 'model_id', '?')}|{texts_hash(texts)}".encode()).hexdigest()[:20]
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"emb-{key}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    batches = root / f"emb-{key}.batches"
    batches.mkdir(exist_ok=True)
    emb = embed_in_batches(
        encoder.encode, texts, batch_size=batch_size, progress=progress, desc=desc, batch_dir=batches
    )
    tmp = root / f"emb-{key}.tmp.npy"
    np.save(tmp, emb, allow_pickle=False)
    tmp.replace(path)
    shutil.rmtree(batches, ignore_errors=True)
    return emb
