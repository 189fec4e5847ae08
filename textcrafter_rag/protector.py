"""The framework-free core: encode texts with a base encoder, then protect the vectors.

Both framework adapters (LangChain, LlamaIndex) are thin wrappers around :class:`Protector`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .encoders import Encoder, as_encoder, encoder_from_name
from .mechanisms import Mechanism
from .specs import DEFAULT_POLICY, PolicyArg, resolve_policy
from .validation import check_text, check_texts, check_vectors

__all__ = ["Protector", "protector_for"]


class Protector:
    """Embed texts with a base encoder and protect every vector before it leaves.

    Args:
        base: Any base encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts, or ``None``
            when only precomputed vectors are protected.
        query_base: A separate encoder for queries, for models that embed queries differently from
            documents (instruction prefixes, ``input_type="search_query"``); default ``base``.
        policy: See :func:`~textcrafter_rag.specs.resolve_policy`.
        protect_queries: Also protect query vectors. Off by default: queries are not stored, and the
            retrieval benchmark shows protecting both sides costs retrieval quality (README).
        chunk_size: Rows protected per step; bounds peak memory on huge batches.
        secure_mode: Draw noise from the OS CSPRNG.
        seed: Reproducible noise for experiments (warns).
    """

    def __init__(
        self,
        *,
        base: Any = None,
        query_base: Any = None,
        policy: PolicyArg = DEFAULT_POLICY,
        protect_queries: bool = False,
        chunk_size: int = 4096,
        secure_mode: bool = False,
        seed: int | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.encoder: Encoder | None = as_encoder(base) if base is not None else None
        self.query_encoder: Encoder | None = as_encoder(query_base) if query_base is not None else self.encoder
        self.mechanism: Mechanism = resolve_policy(policy, encoder=self.encoder, secure_mode=secure_mode, seed=seed)
        self.protect_queries = bool(protect_queries)
        self.chunk_size = int(chunk_size)

    @property
    def dimension(self) -> int | None:
        """The protected dimension, when known."""
        if self.mechanism.dim is not None:
            return self.mechanism.dim
        return self.encoder.dimension if self.encoder is not None else None

    def protect(self, vectors: Any) -> np.ndarray:
        """Protect precomputed vectors ``(n, D)``; returns a new float32 array.

        The whole batch is validated before any row is protected, and a failure in any chunk
        raises without returning anything: no partial batch is ever released.
        """
        x = check_vectors(vectors, dim=self.dimension)  # validated once, here, for every chunk
        if x.shape[0] <= self.chunk_size:
            return self.mechanism._release(x)
        out = np.empty_like(x)
        for start in range(0, x.shape[0], self.chunk_size):
            stop = start + self.chunk_size
            out[start:stop] = self.mechanism._release(np.ascontiguousarray(x[start:stop]))
        return out

    def _require_encoder(self, *, query: bool = False) -> Encoder:
        enc = self.query_encoder if query else self.encoder
        if enc is None:
            raise ValueError("this Protector has no base encoder; pass base=... to embed texts")
        return enc

    def _empty(self) -> np.ndarray:
        return np.empty((0, self._require_encoder().dimension), dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed and protect documents. An empty list gives a ``(0, D)`` array."""
        texts = check_texts(texts, allow_empty_batch=True)
        if not texts:
            return self._empty()
        return self.protect(self._require_encoder().encode(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed a query; protected only if ``protect_queries``. Returns a 1-D array."""
        text = check_text(text, name="query")
        vec = self._require_encoder(query=True).encode([text])
        return (self.protect(vec) if self.protect_queries else vec)[0]

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Async :meth:`embed_documents`: awaits the base's native async method, then protects."""
        texts = check_texts(texts, allow_empty_batch=True)
        if not texts:
            return self._empty()
        vecs = await self._require_encoder().aencode(texts)
        return await asyncio.to_thread(self.protect, vecs)

    async def aembed_query(self, text: str) -> np.ndarray:
        """Async :meth:`embed_query`."""
        text = check_text(text, name="query")
        vec = await self._require_encoder(query=True).aencode([text])
        return (await asyncio.to_thread(self.protect, vec) if self.protect_queries else vec)[0]

    def __repr__(self) -> str:
        return (
            f"Protector(encoder={self.encoder!r}, mechanism={self.mechanism!r}, protect_queries={self.protect_queries})"
        )


def protector_for(
    *,
    policy: str | os.PathLike[str] | None = None,
    encoder: str | None = None,
    secure_mode: bool = False,
    chunk_size: int = 4096,
) -> Protector:
    """A :class:`Protector` from names, as the CLI and Ray actors get them.

    Args:
        policy: A saved policy directory, or ``None`` for ``"auto"`` (shipped, cached or fitted
            for the encoder; see :func:`~textcrafter_rag.specs.resolve_policy`).
        encoder: ``"bundled"``, a sentence-transformers model name or path, or ``None`` for
            vectors only. With neither a policy nor an encoder, the vectors are taken to come from
            the bundled all-MiniLM-L6-v2 and its shipped policy is used (a 768-d input then fails
            the dimension check with a clear error).
        secure_mode: Draw noise from the OS CSPRNG.
        chunk_size: Rows protected per step.
    """
    base = encoder_from_name(encoder) if encoder is not None else None
    return Protector(
        base=base, policy=DEFAULT_POLICY if policy is None else policy, secure_mode=secure_mode, chunk_size=chunk_size
    )
