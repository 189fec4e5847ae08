"""The read methods of :class:`~langchain_textcrafter.SealedVectorStore`, split from it by role.

Every LangChain search entry point (text or vector query, scores, relevance scores, MMR, sync and async)
checks its arguments (``k``, filters on sealed fields) before anything is asked, then hands the search to the
store's reader (:mod:`._answers`: the sealed engine, or single-stage's wrapped store), looked up once by the mode.
:class:`SealedReading` holds those entry points and the counters searches keep (:attr:`~SealedReading.stats`);
the sealed store defines the steps the readers use.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.logs import SearchCounters
from textcrafter_rag.sealed.candidates import VECTOR_KEY
from textcrafter_rag.sealed.core import MODE_KEY, SealedSearch
from textcrafter_rag.sealed.records import ID_FIELD

from ._answers import Answers

__all__ = ["STORE_ID_FIELD", "SealedReading", "has_get_by_ids", "store_id_field"]

#: Where stores that leave ``Document.id`` empty put the point id of a hit (``langchain_qdrant``).
STORE_ID_FIELD = "_id"


def store_id_field(store: VectorStore) -> str:
    """Where a hit's id is if ``Document.id`` is empty: ``langchain_milvus``'s ``_primary_field``, else ``_id``."""
    primary = getattr(store, "_primary_field", None)
    return primary if isinstance(primary, str) and primary else STORE_ID_FIELD


def has_get_by_ids(store: VectorStore) -> bool:
    return type(store).get_by_ids is not VectorStore.get_by_ids


class SealedReading(SearchCounters, VectorStore):
    """Search methods over the reader of the store's mode (see :class:`~langchain_textcrafter.SealedVectorStore`)."""

    _search: SealedSearch
    _store: VectorStore
    _answers: Answers

    # Steps the sealed store defines.
    @abstractmethod
    def _check(self, kwargs: dict[str, Any], *, k: Any = 1) -> None:
        """Refuse a ``k`` that is not a positive int and filters on sealed fields, before the store is asked;
        wrap callable filters in place (the library's records never reach one)."""

    @abstractmethod
    def _marker(self, *, write: bool, dim: int | None = None) -> None:
        """Refuse a store written in another mode."""

    @abstractmethod
    def _store_id(self, doc: Document) -> Any:
        """The id the store returned with a hit."""

    @abstractmethod
    def _open(self, doc: Document) -> Document:
        """A hit, opened."""

    @abstractmethod
    def _opened(self, docs: Iterable[Document]) -> list[Document]:
        """Hits, opened."""

    @abstractmethod
    def _opened_scored(self, pairs: Iterable[tuple[Document, float]]) -> list[tuple[Document, float]]:
        """Scored hits, opened."""

    def _hit_fields(self, hits: list[Document]) -> list[tuple[Any, Any, Any, Any, Any]]:
        """What the core opens of each hit (see :meth:`~textcrafter_rag.sealed.core.SealedSearch.open_hits`)."""
        return [
            (
                self._store_id(d),
                d.metadata.get(ID_FIELD),
                d.metadata.get(VECTOR_KEY),
                d.metadata.get(MODE_KEY),
                d.page_content,
            )
            for d in hits
        ]

    def _reader(self) -> Answers:
        """The reader of the store's mode, after the marker check: a store written in another mode is refused
        (nothing sent), or, where the caller named no mode, opened in its own (:mod:`._answers`)."""
        self._marker(write=False)
        return self._answers

    async def _areader(self) -> Answers:
        """Async :meth:`_reader` (the marker is read off the event loop)."""
        await asyncio.to_thread(self._marker, write=False)
        return self._answers

    def _select_relevance_score_fn(self) -> Any:
        return self._answers.relevance_fn()

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a plaintext query (store-specific ``filter`` etc. pass through), opened."""
        return [d for d, _ in self.similarity_search_with_score(query, k=k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search`."""
        return [d for d, _ in await self.asimilarity_search_with_score(query, k=k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Hits with scores (the wrapped store's, or the exact cosine in sealed search), opened."""
        self._check(kwargs, k=k)
        return self._reader().with_score(query, k, kwargs)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score`."""
        self._check(kwargs, k=k)
        return await (await self._areader()).awith_score(query, k, kwargs)

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Hits with relevance scores (the wrapped store's in [0, 1], or the exact cosine), opened."""
        self._check(kwargs, k=k)
        return self._reader().relevance(query, k, kwargs)

    async def asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_relevance_scores`."""
        self._check(kwargs, k=k)
        return await (await self._areader()).arelevance(query, k, kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a query vector (in sealed search a clean one: the store never receives it), opened."""
        self._check(kwargs, k=k)
        return self._reader().by_vector(embedding, k, kwargs)

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search_by_vector`."""
        self._check(kwargs, k=k)
        return await (await self._areader()).aby_vector(embedding, k, kwargs)

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR: the wrapped store's, or over the first ``fetch_k`` opened records' clean vectors."""
        self._check(kwargs, k=k)
        return self._reader().mmr(query, k, fetch_k, lambda_mult, kwargs)

    async def amax_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search`."""
        self._check(kwargs, k=k)
        return await (await self._areader()).ammr(query, k, fetch_k, lambda_mult, kwargs)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR for a query vector, hits opened."""
        self._check(kwargs, k=k)
        return self._reader().mmr_by_vector(embedding, k, fetch_k, lambda_mult, kwargs)

    async def amax_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search_by_vector`."""
        self._check(kwargs, k=k)
        return await (await self._areader()).ammr_by_vector(embedding, k, fetch_k, lambda_mult, kwargs)
