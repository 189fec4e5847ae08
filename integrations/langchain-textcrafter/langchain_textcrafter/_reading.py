"""The read methods of :class:`~langchain_textcrafter.SealedVectorStore`, split from it by role.

Every LangChain search entry point (text or vector query, scores, relevance scores, MMR, sync and async)
either hands the query to the wrapped store's own search (a mode that ``store_ranks``: single-stage, after the
mode check) or runs the mode's sealed search (:mod:`textcrafter_rag.sealed.engine`): the clean query ranks the
records that the index (or, in candidates, the store) picked, opened in this process. :class:`SealedReading`
holds that dispatch and the counters searches keep (:attr:`~SealedReading.stats`); the sealed store defines the
steps.

MMR's ``fetch_k`` is honoured in sealed search: its picks come from the first ``fetch_k`` opened records by exact
cosine, and a ``fetch_k`` above the records one search opens (the store's ``open_k``) is refused.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.logs import SearchCounters
from textcrafter_rag.sealed.candidates import VECTOR_KEY
from textcrafter_rag.sealed.core import MODE_KEY, SealedSearch
from textcrafter_rag.sealed.engine import Found, Query, SearchMode, arun, run
from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.sealed.records import ID_FIELD
from textcrafter_rag.validation import check_store_vectors

from ._port import doc_records
from .clean_vectors import CleanVectors, as_row

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
    """Search methods over the steps a sealed store defines (see :class:`~langchain_textcrafter.SealedVectorStore`)."""

    _search: SealedSearch
    _store: VectorStore
    _clean: CleanVectors
    _id_field: str

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

    # -- single-stage: the wrapped store's own search answers ----------------------------------------

    def _own(self, call: Callable[[int], list[Document]], k: int) -> list[Document]:
        """The wrapped store's own answer (single-stage), opened: asked for one more than ``k``, since the
        store's marker record may rank among the hits (it is never returned), then cut to ``k``."""
        self._marker(write=False)
        return self._opened(call(k + 1))[:k]

    def _own_scored(self, call: Callable[[int], list[tuple[Document, float]]], k: int) -> list[tuple[Document, float]]:
        """:meth:`_own` for scored hits (the store's own scores)."""
        self._marker(write=False)
        return self._opened_scored(call(k + 1))[:k]

    async def _aown(self, call: Callable[[int], Awaitable[list[Document]]], k: int) -> list[Document]:
        """Async :meth:`_own`."""
        await asyncio.to_thread(self._marker, write=False)
        return self._opened(await call(k + 1))[:k]

    async def _aown_scored(
        self, call: Callable[[int], Awaitable[list[tuple[Document, float]]]], k: int
    ) -> list[tuple[Document, float]]:
        """Async :meth:`_own_scored`."""
        await asyncio.to_thread(self._marker, write=False)
        return self._opened_scored(await call(k + 1))[:k]

    # -- sealed search ---------------------------------------------------------------------------

    def _core(self) -> SealedSearch:
        return self._search

    def _query_vector(self, vector: Any) -> np.ndarray:
        return self._core().check_vectors(as_row(vector), name="query vector")[0]

    def _store_query(self, text: str) -> list[float]:
        return self._core().store_query(self._query_vector(self._clean.query(text)))[0].tolist()

    async def _astore_query(self, text: str) -> list[float]:
        return self._core().store_query(self._query_vector(await self._clean.aquery(text)))[0].tolist()

    def _hit_fields(self, hits: Sequence[Document]) -> list[tuple[Any, Any, Any, Any, Any]]:
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

    def _port_records(self, docs: Sequence[Document]) -> list[PortRecord | None]:
        """Documents read by id as the store's records (the index log's are read with a search's records)."""
        return doc_records(docs, id_field=self._id_field)

    def _fetch(self, clean: np.ndarray, k: int, kwargs: Mapping[str, Any]) -> Found[Document]:
        """The records to rank, as the mode asks the store for them (:mod:`textcrafter_rag.sealed.engine`)."""
        self._marker(write=False)  # first: a store written in another mode is searched in its own
        core = self._core()
        core.check_k(k)
        return run(
            self._mode(core, kwargs).find(core, Query(clean, k, self._hit_fields, records=self._port_records)),
            search=lambda vector, n: self._store.similarity_search_by_vector(vector, k=n, **kwargs),
            read=lambda ids: self._store.get_by_ids(ids),
        )

    async def _afetch(self, clean: np.ndarray, k: int, kwargs: Mapping[str, Any]) -> Found[Document]:
        await asyncio.to_thread(self._marker, write=False)
        core = self._core()
        core.check_k(k)
        return await arun(
            self._mode(core, kwargs).find(core, Query(clean, k, self._hit_fields, records=self._port_records)),
            search=lambda vector, n: self._store.asimilarity_search_by_vector(vector, k=n, **kwargs),
            read=lambda ids: self._store.aget_by_ids(ids),
        )

    @staticmethod
    def _mode(core: SealedSearch, kwargs: Mapping[str, Any]) -> SearchMode:
        """The core's mode; store arguments (filters) only where the store ranks."""
        mode = core.search_mode
        if kwargs and not mode.ranks_in_store:
            raise InvalidInputError(
                f"an index mode ranks in this process and passes nothing to the store: {sorted(kwargs)} cannot "
                "be applied. Filter the opened documents, or search with candidates (search=TwoStageSearch()), "
                "which filters in the store and leaves it noised vectors to compare (SECURITY.md)"
            )
        return mode

    def _ranked(self, query: np.ndarray, found: Found, k: int) -> list[tuple[Document, float]]:
        core = self._core()
        ranked = core.rank(query, found.vectors, len(found.positions))
        return core.first_that_open(ranked, lambda i: self._open(found.hits[found.positions[i]]), k)

    def _mmr_fetch_k(self, fetch_k: int) -> int:
        """MMR's ``fetch_k``, checked: a search opens at most the store's ``open_k`` records."""
        core = self._core()
        if isinstance(fetch_k, bool) or not isinstance(fetch_k, (int, np.integer)) or fetch_k < 1:
            raise InvalidInputError(f"fetch_k must be a positive int, got {fetch_k!r}")
        if fetch_k > core.open_k:
            raise InvalidInputError(
                f"MMR's fetch_k={fetch_k} exceeds the {core.open_k} records a search of this store opens (its "
                f"open_k): pass fetch_k<={core.open_k}, or raise the store's open_k"
            )
        return int(fetch_k)

    def _mmr(self, query: np.ndarray, found: Found, k: int, fetch_k: int, lambda_mult: float) -> list[Document]:
        """MMR's picks (at most ``k``) among the first ``fetch_k`` opened records by exact cosine, as LangChain's."""
        if not found.positions:
            return []
        core = self._core()
        rows = [row for row, _ in core.rank(query, found.vectors, fetch_k)]
        picked = maximal_marginal_relevance(query, found.vectors[rows].tolist(), lambda_mult=lambda_mult, k=k)
        kept = core.first_that_open(
            [(rows[i], 0.0) for i in picked], lambda i: self._open(found.hits[found.positions[i]]), k
        )
        return [doc for doc, _ in kept]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a plaintext query (store-specific ``filter`` etc. pass through), opened."""
        return [d for d, _ in self.similarity_search_with_score(query, k=k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search`."""
        return [d for d, _ in await self.asimilarity_search_with_score(query, k=k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Hits with scores (the wrapped store's, or the exact cosine in sealed search), opened."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return self._own_scored(lambda n: self._store.similarity_search_with_score(query, k=n, **kwargs), k)
        clean = self._query_vector(self._clean.query(query))
        return self._ranked(clean, self._fetch(clean, k, kwargs), k)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score`."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return await self._aown_scored(lambda n: self._store.asimilarity_search_with_score(query, k=n, **kwargs), k)
        clean = self._query_vector(await self._clean.aquery(query))
        hits = await self._afetch(clean, k, kwargs)
        return await asyncio.to_thread(self._ranked, clean, hits, k)

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Hits with relevance scores (the wrapped store's in [0, 1], or the exact cosine), opened."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return self._own_scored(
                lambda n: self._store.similarity_search_with_relevance_scores(query, k=n, **kwargs), k
            )
        return super().similarity_search_with_relevance_scores(query, k=k, **kwargs)

    async def asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_relevance_scores`."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return await self._aown_scored(
                lambda n: self._store.asimilarity_search_with_relevance_scores(query, k=n, **kwargs), k
            )
        return await super().asimilarity_search_with_relevance_scores(query, k=k, **kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a query vector (in sealed search a clean one: the store never receives it), opened."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            vector = check_store_vectors(as_row(embedding), name="query vector")[0].tolist()
            return self._own(lambda n: self._store.similarity_search_by_vector(vector, k=n, **kwargs), k)
        clean = self._query_vector(embedding)
        return [d for d, _ in self._ranked(clean, self._fetch(clean, k, kwargs), k)]

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search_by_vector`."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            vector = check_store_vectors(as_row(embedding), name="query vector")[0].tolist()
            return await self._aown(lambda n: self._store.asimilarity_search_by_vector(vector, k=n, **kwargs), k)
        clean = self._query_vector(embedding)
        hits = await self._afetch(clean, k, kwargs)
        return [d for d, _ in await asyncio.to_thread(self._ranked, clean, hits, k)]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR: the wrapped store's, or over the first ``fetch_k`` opened records' clean vectors."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return self._own(
                lambda n: self._store.max_marginal_relevance_search(query, n, max(fetch_k, n), lambda_mult, **kwargs), k
            )
        fetch_k = self._mmr_fetch_k(fetch_k)
        clean = self._query_vector(self._clean.query(query))
        return self._mmr(clean, self._fetch(clean, fetch_k, kwargs), k, fetch_k, lambda_mult)

    async def amax_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search`."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            return await self._aown(
                lambda n: self._store.amax_marginal_relevance_search(query, n, max(fetch_k, n), lambda_mult, **kwargs),
                k,
            )
        fetch_k = self._mmr_fetch_k(fetch_k)
        clean = self._query_vector(await self._clean.aquery(query))
        hits = await self._afetch(clean, fetch_k, kwargs)
        return await asyncio.to_thread(self._mmr, clean, hits, k, fetch_k, lambda_mult)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR for a query vector, hits opened."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            vector = check_store_vectors(as_row(embedding), name="query vector")[0].tolist()
            return self._own(
                lambda n: self._store.max_marginal_relevance_search_by_vector(
                    vector, n, max(fetch_k, n), lambda_mult, **kwargs
                ),
                k,
            )
        fetch_k = self._mmr_fetch_k(fetch_k)
        clean = self._query_vector(embedding)
        return self._mmr(clean, self._fetch(clean, fetch_k, kwargs), k, fetch_k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search_by_vector`."""
        self._check(kwargs, k=k)
        if self._core().search_mode.store_ranks:
            vector = check_store_vectors(as_row(embedding), name="query vector")[0].tolist()
            return await self._aown(
                lambda n: self._store.amax_marginal_relevance_search_by_vector(
                    vector, n, max(fetch_k, n), lambda_mult, **kwargs
                ),
                k,
            )
        fetch_k = self._mmr_fetch_k(fetch_k)
        clean = self._query_vector(embedding)
        hits = await self._afetch(clean, fetch_k, kwargs)
        return await asyncio.to_thread(self._mmr, clean, hits, k, fetch_k, lambda_mult)
