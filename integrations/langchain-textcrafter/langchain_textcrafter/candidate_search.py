"""The two-stage read and write path of :class:`~langchain_textcrafter.SealedVectorStore` (``fetch_k=``).

The store receives keyed candidate vectors and protected queries (:mod:`textcrafter_rag.two_stage`);
this object computes the clean vectors in the process, asks the store for ``fetch_k`` candidates with
a protected query, and opens the candidates' sealed clean vectors for the exact re-rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed_records import ID_FIELD, RecordSealer
from textcrafter_rag.two_stage import VECTOR_KEY, TwoStage

from .embeddings import ProtectedEmbeddings

__all__ = ["CandidateSearch"]


class CandidateSearch:
    """Clean vectors from the user's embeddings, protected queries for the store, sealed vectors opened.

    A :class:`ProtectedEmbeddings` is read through its base encoders (its own mechanism and rotation
    are replaced by the candidate noise); any other LangChain ``Embeddings`` is taken as it is.

    Args:
        two_stage: The keyed candidate noise and vector sealing of the store's key and context.
        embedding: The user's embeddings.
    """

    def __init__(self, two_stage: TwoStage, embedding: Embeddings) -> None:
        self.two_stage = two_stage
        self._embedding = embedding
        protector = embedding.protector if isinstance(embedding, ProtectedEmbeddings) else None
        self._documents = protector.encoder if protector is not None else None
        self._queries = protector.query_encoder if protector is not None else None

    # -- clean vectors, in this process -------------------------------------------------------------

    def documents(self, texts: list[str]) -> np.ndarray:
        """The clean document vectors (one encoder call)."""
        if self._documents is not None:
            return self._documents.encode(texts)
        return np.asarray(self._embedding.embed_documents(texts), dtype=np.float32)

    async def adocuments(self, texts: list[str]) -> np.ndarray:
        """Async :meth:`documents`."""
        if self._documents is not None:
            return await self._documents.aencode(texts)
        return np.asarray(await self._embedding.aembed_documents(texts), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        """The clean query vector (never sent to the store)."""
        if self._queries is not None:
            return self._queries.encode([text])[0]
        return np.asarray(self._embedding.embed_query(text), dtype=np.float32)

    async def aquery(self, text: str) -> np.ndarray:
        """Async :meth:`query`."""
        if self._queries is not None:
            return (await self._queries.aencode([text]))[0]
        return np.asarray(await self._embedding.aembed_query(text), dtype=np.float32)

    # -- what the store receives --------------------------------------------------------------------

    def store_query(self, text: str) -> list[float]:
        """What the store is searched with for ``text``: a protected query, never the clean one."""
        return self.two_stage.protect_query(self.query(text), text=text)[0].tolist()

    async def astore_query(self, text: str) -> list[float]:
        """Async :meth:`store_query`."""
        return self.two_stage.protect_query(await self.aquery(text), text=text)[0].tolist()

    def seal(self, sealed: list[Document], clean: np.ndarray, record_ids: list[Any], texts: list[str]) -> list[Any]:
        """Seal each clean vector into its sealed record's metadata; the candidate vectors the store receives."""
        candidates = self.two_stage.protect_documents(clean, record_ids=record_ids, texts=texts)
        for doc, vector, rid in zip(sealed, clean, record_ids, strict=True):
            doc.metadata[VECTOR_KEY] = self.two_stage.seal_vector(vector, record_id=rid)
        return candidates.tolist()

    def _fetch_k(self, k: int) -> int:
        fetch_k = self.two_stage.search.fetch_k
        if k > fetch_k:
            raise InvalidInputError(f"k={k} exceeds this store's fetch_k={fetch_k}: raise fetch_k to return more hits")
        return fetch_k

    def fetch(self, store: VectorStore, clean: np.ndarray, k: int, text: str | None, **kwargs: Any) -> list[Document]:
        """``fetch_k`` candidates for a clean query (``text`` keys its noise; ``None`` for a vector query)."""
        protected = self.two_stage.protect_query(clean, text=text)[0].tolist()
        return store.similarity_search_by_vector(protected, k=self._fetch_k(k), **kwargs)

    async def afetch(
        self, store: VectorStore, clean: np.ndarray, k: int, text: str | None, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`fetch`."""
        protected = self.two_stage.protect_query(clean, text=text)[0].tolist()
        return await store.asimilarity_search_by_vector(protected, k=self._fetch_k(k), **kwargs)

    def open_vectors(self, hits: Sequence[Document], store_id: Callable[[Document], Any]) -> np.ndarray:
        """The candidates' sealed clean vectors, opened (their texts stay sealed until they win).

        Raises:
            SealError: A vector is missing, or does not open under this key, context and record id.
        """
        vectors = []
        for doc in hits:
            rid = RecordSealer.resolve_record_id(store_id(doc), doc.metadata.get(ID_FIELD))
            vectors.append(self.two_stage.open_vector(doc.metadata.get(VECTOR_KEY), record_id=rid))
        return np.stack(vectors) if vectors else np.empty((0, 0), dtype=np.float32)

    def __repr__(self) -> str:
        return f"CandidateSearch(search={self.two_stage.search!r}, key=<redacted>)"
