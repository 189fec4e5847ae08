"""Who answers a :class:`~langchain_textcrafter.SealedVectorStore`'s searches: the sealed engine, or the wrapped store.

A mode says who answers (:attr:`~textcrafter_rag.sealed.engine.SearchMode.answered_by`), and the sealed store
looks its reader up here (:data:`ANSWERS`) once per mode: every search entry point, the query the wrapped store
receives, the clean vectors and a copy's vectors then come from that reader, so nothing else in the adapter
depends on the mode.

* :class:`EngineAnswers` (``"engine"``: the store-held index, candidates, the app-side index): the mode's search
  (:mod:`textcrafter_rag.sealed.engine`) asks the store for records, which are opened and ranked here by the
  clean query's exact cosine. MMR's ``fetch_k`` is honoured: its picks come from the first ``fetch_k`` opened
  records, and a ``fetch_k`` above the records one search opens (``open_k``) is refused.
* :class:`StoreAnswers` (``"store"``: single-stage): the wrapped store's own search answers (its scores, its
  MMR), asked for one hit more than ``k`` since the marker record may rank among them, and its hits are opened.
"""

from __future__ import annotations

import asyncio
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.core import UnprotectedVectorsWarning
from textcrafter_rag.sealed.engine import Found, Query, arun, run
from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.validation import check_store_vectors

from ._port import doc_records
from .clean_vectors import CleanVectors, as_row, check_embedding_key
from .embeddings import ProtectedEmbeddings

if TYPE_CHECKING:
    from .sealed import SealedVectorStore

__all__ = ["ANSWERS", "Answers", "EngineAnswers", "StoreAnswers"]

Scored = list[tuple[Document, float]]


class Answers(ABC):
    """The search entry points of one answering kind, over the sealed store's steps (one per store and mode).

    The sealed store has read its marker before any of them runs (so a store written in another mode was
    refused, or opened in its own, before this reader was chosen).
    """

    #: Whether a store written in a mode of this kind opens in it when the caller names no mode. The engine's
    #: modes send the store no clean query; single-stage sends it whatever the given embeddings make of the
    #: query, so only a caller who names it (with protected embeddings) gets it.
    adopted: ClassVar[bool]
    #: Whether records carry the engine's layout (the sealed clean vector, the marker, the index log) and are
    #: read by id: a Milvus store then needs dynamic fields and a reader by id (:mod:`._milvus`).
    reads_records: ClassVar[bool]

    def __init__(self, sealed: SealedVectorStore, embedding: Embeddings) -> None:
        self._sealed = sealed
        #: The vectors documents and queries are embedded to in this process (:class:`CleanVectors`).
        self.clean = CleanVectors(embedding, own=not self.reads_records)

    @staticmethod
    @abstractmethod
    def check_embedding(embedding: Embeddings, key: SecretKey) -> None:
        """Refuse or warn about embeddings this kind of answer would misuse, at construction."""

    @abstractmethod
    def store_query(self, text: str) -> list[float]:
        """The vector the wrapped store receives for a query text (its own search, called directly)."""

    @abstractmethod
    async def astore_query(self, text: str) -> list[float]:
        """Async :meth:`store_query`."""

    @abstractmethod
    def relevance_fn(self) -> Callable[[float], float]:
        """How a score becomes LangChain's relevance score."""

    @abstractmethod
    def with_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored: ...

    @abstractmethod
    async def awith_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored: ...

    @abstractmethod
    def relevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored: ...

    @abstractmethod
    async def arelevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored: ...

    @abstractmethod
    def by_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]: ...

    @abstractmethod
    async def aby_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]: ...

    @abstractmethod
    def mmr(self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]) -> list[Document]: ...

    @abstractmethod
    async def ammr(
        self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]: ...

    @abstractmethod
    def mmr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]: ...

    @abstractmethod
    async def ammr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]: ...

    @abstractmethod
    def copied_vectors(self, raw: list[Document]) -> Any:
        """What a copy of these source records carries to the target: their opened clean vectors, or ``None``."""

    @abstractmethod
    def add_copies(self, opened: list[Document], ids: list[Any], vectors: Any, kwargs: dict) -> list[str]:
        """Add opened copies (with their source's :meth:`copied_vectors`) to this store."""


class StoreAnswers(Answers):
    """Single-stage: the wrapped store's own search answers, and its hits are opened."""

    reads_records = False
    adopted = False

    @staticmethod
    def check_embedding(embedding: Embeddings, key: SecretKey) -> None:
        if not isinstance(embedding, ProtectedEmbeddings):
            warnings.warn(
                f"single-stage search (search=None): the store ranks the vectors of {type(embedding).__name__}, "
                "which are not protected; wrap them (ProtectedEmbeddings(base=...)) or leave search= out",
                UnprotectedVectorsWarning,
                stacklevel=3,
            )

    def store_query(self, text: str) -> list[float]:
        return self._sealed.embeddings.embed_query(text)

    async def astore_query(self, text: str) -> list[float]:
        return await self._sealed.embeddings.aembed_query(text)

    def relevance_fn(self) -> Callable[[float], float]:
        return self._sealed.store._select_relevance_score_fn()

    def _own(self, call: Callable[[int], list[Document]], k: int) -> list[Document]:
        """The wrapped store's answer, asked for ``k + 1`` (the marker may rank among the hits), opened, cut."""
        return self._sealed._opened(call(k + 1))[:k]

    def _own_scored(self, call: Callable[[int], Scored], k: int) -> Scored:
        return self._sealed._opened_scored(call(k + 1))[:k]

    async def _aown(self, call: Callable[[int], Awaitable[list[Document]]], k: int) -> list[Document]:
        return self._sealed._opened(await call(k + 1))[:k]

    async def _aown_scored(self, call: Callable[[int], Awaitable[Scored]], k: int) -> Scored:
        return self._sealed._opened_scored(await call(k + 1))[:k]

    def with_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        return self._own_scored(lambda n: self._sealed._store.similarity_search_with_score(query, k=n, **kwargs), k)

    async def awith_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        store = self._sealed._store
        return await self._aown_scored(lambda n: store.asimilarity_search_with_score(query, k=n, **kwargs), k)

    def relevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        store = self._sealed._store
        return self._own_scored(lambda n: store.similarity_search_with_relevance_scores(query, k=n, **kwargs), k)

    async def arelevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        store = self._sealed._store
        return await self._aown_scored(
            lambda n: store.asimilarity_search_with_relevance_scores(query, k=n, **kwargs), k
        )

    def by_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]:
        row = check_store_vectors(as_row(vector), name="query vector")[0].tolist()
        return self._own(lambda n: self._sealed._store.similarity_search_by_vector(row, k=n, **kwargs), k)

    async def aby_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]:
        row = check_store_vectors(as_row(vector), name="query vector")[0].tolist()
        return await self._aown(lambda n: self._sealed._store.asimilarity_search_by_vector(row, k=n, **kwargs), k)

    def mmr(self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]) -> list[Document]:
        store = self._sealed._store
        return self._own(
            lambda n: store.max_marginal_relevance_search(query, n, max(fetch_k, n), lambda_mult, **kwargs), k
        )

    async def ammr(
        self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        store = self._sealed._store
        return await self._aown(
            lambda n: store.amax_marginal_relevance_search(query, n, max(fetch_k, n), lambda_mult, **kwargs), k
        )

    def mmr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        row = check_store_vectors(as_row(vector), name="query vector")[0].tolist()
        store = self._sealed._store
        return self._own(
            lambda n: store.max_marginal_relevance_search_by_vector(row, n, max(fetch_k, n), lambda_mult, **kwargs),
            k,
        )

    async def ammr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        row = check_store_vectors(as_row(vector), name="query vector")[0].tolist()
        store = self._sealed._store
        return await self._aown(
            lambda n: store.amax_marginal_relevance_search_by_vector(row, n, max(fetch_k, n), lambda_mult, **kwargs),
            k,
        )

    def copied_vectors(self, raw: list[Document]) -> None:
        """None: a single-stage record carries no clean vector (the target embeds the opened text)."""
        return None

    def add_copies(self, opened: list[Document], ids: list[Any], vectors: Any, kwargs: dict) -> list[str]:
        """Embedded again with this store's (protected) embeddings: a clean vector is never stored here."""
        return self._sealed.add_documents(opened, ids=ids, **kwargs)


class EngineAnswers(Answers):
    """The mode's sealed search (:mod:`textcrafter_rag.sealed.engine`), opened and ranked in this process."""

    reads_records = True
    adopted = True

    @staticmethod
    def check_embedding(embedding: Embeddings, key: SecretKey) -> None:
        check_embedding_key(embedding, key)

    def _query_vector(self, vector: Any) -> np.ndarray:
        return self._sealed._search.check_vectors(as_row(vector), name="query vector")[0]

    def store_query(self, text: str) -> list[float]:
        return self._sealed._search.store_query(self._query_vector(self.clean.query(text)))[0].tolist()

    async def astore_query(self, text: str) -> list[float]:
        return self._sealed._search.store_query(self._query_vector(await self.clean.aquery(text)))[0].tolist()

    def relevance_fn(self) -> Callable[[float], float]:
        return lambda cosine: cosine  # the exact cosine is the relevance

    def _records(self, docs: Sequence[Document]) -> list[PortRecord | None]:
        """Documents read by id as the store's records (the index log's are read with a search's records)."""
        return doc_records(docs, id_field=self._sealed._id_field)

    def _query(self, clean: np.ndarray, k: int, kwargs: Mapping[str, Any]) -> Query:
        hits = self._sealed._hit_fields
        return Query(clean, k, hits, store_args=tuple(sorted(kwargs)), records=self._records)

    def _fetch(self, clean: np.ndarray, k: int, kwargs: Mapping[str, Any]) -> Found[Document]:
        """The records to rank, as the mode asks the store for them (filters go with a store search)."""
        sealed = self._sealed
        core = sealed._search
        core.check_k(k)
        return run(
            core.search_mode.find(core, self._query(clean, k, kwargs)),
            search=lambda vector, n: sealed._store.similarity_search_by_vector(vector, k=n, **kwargs),
            read=lambda ids: sealed._store.get_by_ids(ids),
        )

    async def _afetch(self, clean: np.ndarray, k: int, kwargs: Mapping[str, Any]) -> Found[Document]:
        sealed = self._sealed
        core = sealed._search
        core.check_k(k)
        return await arun(
            core.search_mode.find(core, self._query(clean, k, kwargs)),
            search=lambda vector, n: sealed._store.asimilarity_search_by_vector(vector, k=n, **kwargs),
            read=lambda ids: sealed._store.aget_by_ids(ids),
        )

    def _ranked(self, query: np.ndarray, found: Found, k: int) -> Scored:
        core = self._sealed._search
        ranked = core.rank(query, found.vectors, len(found.positions))
        return core.first_that_open(ranked, lambda i: self._sealed._open(found.hits[found.positions[i]]), k)

    def _fetch_k(self, fetch_k: int) -> int:
        """MMR's ``fetch_k``, checked: a search opens at most the store's ``open_k`` records."""
        core = self._sealed._search
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
        core = self._sealed._search
        rows = [row for row, _ in core.rank(query, found.vectors, fetch_k)]
        picked = maximal_marginal_relevance(query, found.vectors[rows].tolist(), lambda_mult=lambda_mult, k=k)
        kept = core.first_that_open(
            [(rows[i], 0.0) for i in picked], lambda i: self._sealed._open(found.hits[found.positions[i]]), k
        )
        return [doc for doc, _ in kept]

    def with_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        clean = self._query_vector(self.clean.query(query))
        return self._ranked(clean, self._fetch(clean, k, kwargs), k)

    async def awith_score(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        clean = self._query_vector(await self.clean.aquery(query))
        hits = await self._afetch(clean, k, kwargs)
        return await asyncio.to_thread(self._ranked, clean, hits, k)

    def relevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        return VectorStore.similarity_search_with_relevance_scores(self._sealed, query, k=k, **kwargs)

    async def arelevance(self, query: str, k: int, kwargs: dict[str, Any]) -> Scored:
        return await VectorStore.asimilarity_search_with_relevance_scores(self._sealed, query, k=k, **kwargs)

    def by_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]:
        clean = self._query_vector(vector)
        return [d for d, _ in self._ranked(clean, self._fetch(clean, k, kwargs), k)]

    async def aby_vector(self, vector: Any, k: int, kwargs: dict[str, Any]) -> list[Document]:
        clean = self._query_vector(vector)
        hits = await self._afetch(clean, k, kwargs)
        return [d for d, _ in await asyncio.to_thread(self._ranked, clean, hits, k)]

    def mmr(self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]) -> list[Document]:
        fetch_k = self._fetch_k(fetch_k)  # before the encoder runs
        return self.mmr_by_vector(self.clean.query(query), k, fetch_k, lambda_mult, kwargs)

    async def ammr(
        self, query: str, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        fetch_k = self._fetch_k(fetch_k)
        return await self.ammr_by_vector(await self.clean.aquery(query), k, fetch_k, lambda_mult, kwargs)

    def mmr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        fetch_k = self._fetch_k(fetch_k)
        clean = self._query_vector(vector)
        return self._mmr(clean, self._fetch(clean, fetch_k, kwargs), k, fetch_k, lambda_mult)

    async def ammr_by_vector(
        self, vector: Any, k: int, fetch_k: int, lambda_mult: float, kwargs: dict[str, Any]
    ) -> list[Document]:
        fetch_k = self._fetch_k(fetch_k)
        clean = self._query_vector(vector)
        hits = await self._afetch(clean, fetch_k, kwargs)
        return await asyncio.to_thread(self._mmr, clean, hits, k, fetch_k, lambda_mult)

    def copied_vectors(self, raw: list[Document]) -> Any:
        """The opened clean vectors and noise seeds (strict: a record that does not open stops the copy)."""
        core = self._sealed._search
        core.strict, strict = True, core.strict
        try:
            return core.open_hits(self._sealed._hit_fields(raw))
        finally:
            core.strict = strict

    def add_copies(self, opened: list[Document], ids: list[Any], vectors: Any, kwargs: dict) -> list[str]:
        """Sealed again with the source's clean vectors and seeds (no encoder, no second noise draw), or, from a
        single-stage source that carries none, embedded again."""
        if vectors is None:
            return self._sealed.add_documents(opened, ids=ids, **kwargs)
        clean = self._sealed._search.check_vectors(vectors.vectors)
        return self._sealed._add(opened, ids, clean, dict(kwargs), seeds=vectors.seeds)


#: The reader of each answering kind, by :attr:`~textcrafter_rag.sealed.engine.SearchMode.answered_by`.
ANSWERS: dict[str, type[Answers]] = {"engine": EngineAnswers, "store": StoreAnswers}
