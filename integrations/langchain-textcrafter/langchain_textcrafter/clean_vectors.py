"""Clean vectors from the user's embeddings, in this process, for the sealed store's search modes.

The sealed store needs the clean document and query vectors (they are sealed, and the query ranks the
opened records); the store itself only ever receives what :class:`~textcrafter_rag.sealed.core.SealedSearch`
builds from them. A :class:`ProtectedEmbeddings` is read through its base encoders (its own mechanism and
rotation would only blur the exact re-rank; the sealed store's key rotates and noises what the store gets);
any other LangChain ``Embeddings`` is taken as it is.
"""

from __future__ import annotations

import numpy as np
from langchain_core.embeddings import Embeddings

from textcrafter_rag.adapters import check_sealed_key
from textcrafter_rag.sealing import SecretKey

from .embeddings import ProtectedEmbeddings

__all__ = ["CleanVectors", "as_row", "check_embedding_key"]


class CleanVectors:
    """The clean document and query vectors of the user's embeddings (never sent to the store).

    Args:
        embedding: The user's embeddings.
        own: Take the embeddings' own vectors, protected ones included: single-stage, where the store ranks
            them (and no clean vector is kept).
    """

    def __init__(self, embedding: Embeddings, *, own: bool = False) -> None:
        self._embedding = embedding
        protector = embedding.protector if isinstance(embedding, ProtectedEmbeddings) and not own else None
        self._documents = protector.encoder if protector is not None else None
        self._queries = protector.query_encoder if protector is not None else None

    def documents(self, texts: list[str]) -> object:
        """The clean document vectors (one encoder call; validated by the caller)."""
        if self._documents is not None:
            return self._documents.encode(texts)
        return self._embedding.embed_documents(texts)

    async def adocuments(self, texts: list[str]) -> object:
        """Async :meth:`documents`."""
        if self._documents is not None:
            return await self._documents.aencode(texts)
        return await self._embedding.aembed_documents(texts)

    def query(self, text: str) -> object:
        """The clean query vector (validated by the caller)."""
        if self._queries is not None:
            return self._queries.encode([text])[0]
        return self._embedding.embed_query(text)

    async def aquery(self, text: str) -> object:
        """Async :meth:`query`."""
        if self._queries is not None:
            return (await self._queries.aencode([text]))[0]
        return await self._embedding.aembed_query(text)

    def __repr__(self) -> str:
        return f"CleanVectors(embedding={type(self._embedding).__name__})"


def as_row(vector: object) -> np.ndarray:
    """One vector as a ``(1, D)`` array, for the core's validation (strings stay strings: refused by type)."""
    return vector if isinstance(vector, str) else np.asarray(vector).reshape(1, -1)


def check_embedding_key(embedding: Embeddings, key: SecretKey) -> None:
    """A keyed ``ProtectedEmbeddings`` is used, never silently dropped: its key must be the store's.

    The one rule of both adapters (:func:`textcrafter_rag.adapters.check_sealed_key`).
    """
    if isinstance(embedding, ProtectedEmbeddings):
        check_sealed_key(embedding.protector, key)
