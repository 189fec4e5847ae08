"""LangChain ``Embeddings`` that protect every document vector before it reaches a vector store."""

from __future__ import annotations

import os
import warnings
from typing import Any

from langchain_core.embeddings import Embeddings

from textcrafter_rag import Encoder, Mechanism, Protector, bundled_minilm

__all__ = ["ProtectedEmbeddings", "RawVectorCacheWarning"]


class RawVectorCacheWarning(UserWarning):
    """The base embeddings cache raw (unprotected) vectors."""


def _query_encoder(base: Any) -> Encoder | None:
    """An encoder for the base's own query path, when it has one distinct from documents.

    Asymmetric models (instruction prefixes, ``input_type="search_query"``) embed queries
    differently from documents; only a LangChain ``Embeddings`` base exposes that difference.
    """
    if not isinstance(base, Embeddings):
        return None

    def fn(texts: list[str]) -> list[list[float]]:
        return [base.embed_query(t) for t in texts]

    async def afn(texts: list[str]) -> list[list[float]]:
        return [await base.aembed_query(t) for t in texts]

    return Encoder(fn, async_fn=afn, model_id=f"langchain-query:{type(base).__name__}")


def _warn_if_raw_cache(base: Any) -> None:
    if hasattr(base, "underlying_embeddings") and hasattr(base, "document_embedding_store"):
        warnings.warn(
            "base is a CacheBackedEmbeddings: its cache stores the RAW vectors, which an inversion attack "
            "can read. Wrap the other way round so only protected vectors are cached: "
            "CacheBackedEmbeddings.from_bytes_store(ProtectedEmbeddings(base=...), store, namespace=...)",
            RawVectorCacheWarning,
            stacklevel=3,
        )


class ProtectedEmbeddings(Embeddings):
    """Embed with any base model, then protect document vectors with a TextCrafter policy.

    All protection is done by :class:`textcrafter_rag.Protector`; this class only adapts
    its NumPy output to LangChain's ``list[list[float]]``.

    Example:
        >>> from langchain_openai import OpenAIEmbeddings
        >>> emb = ProtectedEmbeddings(base=OpenAIEmbeddings(), policy="path/to/policy")
        >>> store = FAISS.from_texts(texts, emb)  # stores protected vectors only

    Args:
        base: The base model: a LangChain ``Embeddings``, a sentence-transformers model, a
            :class:`textcrafter_rag.Encoder` or a callable ``list[str] -> array``. ``None`` uses the
            bundled offline all-MiniLM-L6-v2.
        policy: A saved policy directory, a :class:`textcrafter_rag.Mechanism`, or ``None`` for the
            policy shipped for the bundled encoder (any other encoder raises ``MissingPolicyError``
            explaining how to fit one).
        protect_queries: Also protect query vectors. Off by default: queries are not stored, and
            protecting both sides costs retrieval quality.
        secure_mode: Draw noise from the OS CSPRNG (for policies loaded from a path).
        seed: Reproducible noise, for experiments only (warns).
        chunk_size: Rows protected per step.

    Raises:
        textcrafter_rag.MissingPolicyError: ``policy=None`` with an encoder that ships no policy.
        textcrafter_rag.FingerprintMismatch: The policy was fitted for another encoder.
    """

    def __init__(
        self,
        *,
        base: Any = None,
        policy: str | os.PathLike[str] | Mechanism | None = None,
        protect_queries: bool = False,
        secure_mode: bool = False,
        seed: int | None = None,
        chunk_size: int = 4096,
    ) -> None:
        if base is None:
            base = bundled_minilm()
        _warn_if_raw_cache(base)
        self.base = base
        self.protector = Protector(
            base=base,
            query_base=_query_encoder(base),
            policy=policy,
            protect_queries=protect_queries,
            chunk_size=chunk_size,
            secure_mode=secure_mode,
            seed=seed,
        )

    @property
    def protect_queries(self) -> bool:
        """Whether query vectors are protected too."""
        return self.protector.protect_queries

    @property
    def mechanism(self) -> Mechanism:
        """The protection mechanism (the loaded policy)."""
        return self.protector.mechanism

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed and protect documents (one policy call for the whole batch)."""
        return self.protector.embed_documents(texts).tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async :meth:`embed_documents`: awaits the base's native async method."""
        return (await self.protector.aembed_documents(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the base's query path; protected only if ``protect_queries``."""
        return self.protector.embed_query(text).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`."""
        return (await self.protector.aembed_query(text)).tolist()

    def __repr__(self) -> str:
        return f"ProtectedEmbeddings(protector={self.protector!r})"
