"""Who answers a LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore`'s queries: the sealed engine, or the store.

A mode says who answers (:attr:`~textcrafter_rag.sealed.engine.SearchMode.answered_by`), and the sealed store
looks its reader up here (:data:`ANSWERS`) by the mode it is in (a store opened with the default may take the
mode it was written in at its first use): what the store is handed for each node, which embedding model a
query and the nodes are read through, and the queries themselves. Nothing else in the adapter depends on the
mode.

* :class:`EngineAnswers` (``"engine"``: the store-held index, candidates, the app-side index): each shell carries
  the node's clean vector sealed, and the mode's search (:mod:`textcrafter_rag.sealed.engine`) brings shells back
  that are opened and ranked here by exact cosine.
* :class:`StoreAnswers` (``"store"``: single-stage): the store ranks the nodes' own embeddings and answers the
  query itself (asked for one more hit, since the marker record may rank among them); its hits are opened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from textcrafter_rag.adapters import check_sealed_key
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.core import UnprotectedVectorsWarning
from textcrafter_rag.sealed.engine import arun, run
from textcrafter_rag.sealed.records import canonical_record_id
from textcrafter_rag.sealing import SecretKey

from ._port import aread_nodes, read_nodes
from ._sealed_steps import Hit
from .base import ProtectedEmbedding
from .instrumentation import PROTECTED_VECTORS, SILENT_VECTORS, warn_unless_silent

if TYPE_CHECKING:
    from .sealed_vector_store import SealedVectorStore

__all__ = ["ANSWERS", "Answers", "EngineAnswers", "StoreAnswers"]


class Answers(ABC):
    """What a sealed store's shells carry and how its queries are answered, for one answering kind."""

    def __init__(self, sealed: SealedVectorStore) -> None:
        self._sealed = sealed

    @staticmethod
    @abstractmethod
    def reading_model(embed_model: Any, key: SecretKey) -> tuple[Any, bool]:
        """The model the store embeds queries with, and whether it re-reads node vectors through it.

        Raises:
            InvalidInputError: ``embed_model`` serves no purpose in this kind of answer.
        """

    @abstractmethod
    def shells(self, nodes: Sequence[BaseNode]) -> tuple[list[BaseNode], np.ndarray | None]:
        """The shells for ``nodes``, and (sealed search) their validated clean vectors."""

    @abstractmethod
    def check_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Warn, before an add, about vectors this kind of answer would hand the store as they are."""

    @abstractmethod
    def query(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult: ...

    @abstractmethod
    async def aquery(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult: ...


def _one_more(query: VectorStoreQuery) -> VectorStoreQuery:
    """A single-stage query for one more hit than asked: the store's marker record may rank among them."""
    return dataclasses.replace(query, similarity_top_k=query.similarity_top_k + 1)


class StoreAnswers(Answers):
    """Single-stage: the store ranks the nodes' own embeddings, and its own query answers."""

    @staticmethod
    def reading_model(embed_model: Any, key: SecretKey) -> tuple[Any, bool]:
        if embed_model is not None:
            raise InvalidInputError("embed_model= is for sealed search (search=...): single-stage stores rank")
        return None, False

    def shells(self, nodes: Sequence[BaseNode]) -> tuple[list[BaseNode], np.ndarray | None]:
        return [self._sealed._shell(n, n.embedding, {}) for n in nodes], None

    def check_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Warn when the store is handed vectors no ``ProtectedEmbedding`` of this process made.

        The store ranks (and holds) these vectors themselves; clean ones are what an inverter reads. Vectors
        made in another process, or long before, are not recognised either: filter the warning then.
        """
        vectors = [n.embedding for n in nodes if n.embedding is not None]
        unknown = PROTECTED_VECTORS.unknown(vectors) if vectors else 0
        if unknown:
            warnings.warn(
                f"single-stage search (search=None): {unknown} of {len(vectors)} vectors came from no "
                "ProtectedEmbedding of this process, and the store ranks and holds them as they are; embed with "
                "ProtectedEmbedding(base=...) or leave search= out",
                UnprotectedVectorsWarning,
                stacklevel=3,
            )

    def _cut(self, query: VectorStoreQuery, result: VectorStoreQueryResult) -> VectorStoreQueryResult:
        """The store's answer opened, the library's records left out, cut to ``similarity_top_k``."""
        opened, k = self._sealed._open_result(result), query.similarity_top_k
        return VectorStoreQueryResult(
            nodes=opened.nodes[:k] if opened.nodes is not None else None,
            similarities=opened.similarities[:k] if opened.similarities is not None else None,
            ids=opened.ids[:k] if opened.ids is not None else None,
        )

    def query(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult:
        self._sealed._marker(write=False)
        return self._cut(query, self._sealed._store.query(_one_more(query), **kwargs))

    async def aquery(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult:
        await self._sealed._amarker(write=False)
        return self._cut(query, await self._sealed._store.aquery(_one_more(query), **kwargs))


class EngineAnswers(Answers):
    """The mode's sealed search: shells carry the clean vector sealed; queries are ranked here, exactly."""

    @staticmethod
    def reading_model(embed_model: Any, key: SecretKey) -> tuple[Any, bool]:
        """The embeddings contract of both adapters: a ``ProtectedEmbedding`` is read through its base encoder
        (LangChain's ``SealedVectorStore(embedding=ProtectedEmbeddings(...))`` likewise), since the store
        protects what it sends and the mechanism's noise would only blur the exact ranking; its key, if any,
        must be the store's. Its :meth:`~.base.ProtectedEmbedding.sealed` twin then embeds queries, and the node
        vectors it made (the index embeds with it too) are re-read through that twin."""
        if not isinstance(embed_model, ProtectedEmbedding):
            return embed_model, False
        check_sealed_key(embed_model.protector, key)
        return embed_model.sealed(), True

    def check_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Nothing to warn about: the store gets no node's vector (a sealed one, and a candidate or a keyed one)."""

    def _clean_vectors(self, nodes: Sequence[BaseNode]) -> list[Any]:
        """The nodes' clean vectors: their embeddings, or the reading model's of the texts the index embedded.

        Re-read only where some came from no ``SealedEmbedding``: an index that embeds with the
        ``ProtectedEmbedding`` the store reads through hands it protected vectors; one that embeds with its
        ``sealed()`` twin hands it the clean ones already, and nothing is embedded twice.
        """
        sealed = self._sealed
        vectors = [n.embedding for n in nodes]
        if sealed._reread and SILENT_VECTORS.unknown(vectors):
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
            return sealed._embed_model._get_text_embeddings(texts)
        return vectors

    def shells(self, nodes: Sequence[BaseNode]) -> tuple[list[BaseNode], np.ndarray | None]:
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidInputError(f"sealed search needs each node's embedding; {len(missing)} node(s) have none")
        if not nodes:
            return [], None
        sealed, core = self._sealed, self._sealed._search
        vectors = self._clean_vectors(nodes)
        clean = core.check_vectors(vectors, name="node embeddings")
        warn_unless_silent(vectors, what="node embeddings", stacklevel=5)
        ids = [canonical_record_id(sealed._records.store_id(n.node_id)) for n in nodes]
        shells = [sealed._shell(n, v.tolist(), {}) for n, v in zip(nodes, core.store_vectors(clean, ids), strict=True)]
        fields = core.record_fields(clean, ids, [s.text for s in shells])  # the vector binds its shell
        for shell, extra in zip(shells, fields, strict=True):
            shell.metadata.update(extra)
        return shells, clean

    def _embedded(self, query: VectorStoreQuery, embedding: Any) -> VectorStoreQuery:
        return dataclasses.replace(query, query_embedding=embedding)

    def query(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult:
        sealed = self._sealed
        if query.query_embedding is None and sealed._embed_model is not None and query.query_str:
            query = self._embedded(query, sealed._embed_model.get_query_embedding(query.query_str))
        clean = sealed._clean_query(query)
        sealed._marker(write=False)
        store = sealed._store
        found = run(
            sealed._find(query, clean, kwargs),
            search=lambda vector, n: sealed._hits(store.query(sealed._candidate_query(query, vector, n), **kwargs)),
            read=lambda ids: read_nodes(store, ids),
        )
        return sealed._ranked(query, clean, sealed._as_hits(found))

    async def aquery(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQueryResult:
        sealed = self._sealed
        if query.query_embedding is None and sealed._embed_model is not None and query.query_str:
            query = self._embedded(query, await sealed._embed_model.aget_query_embedding(query.query_str))
        clean = sealed._clean_query(query)
        await sealed._amarker(write=False)
        store = sealed._store

        async def search(vector: list[float], n: int) -> list[Hit]:
            return sealed._hits(await store.aquery(sealed._candidate_query(query, vector, n), **kwargs))

        found = await arun(sealed._find(query, clean, kwargs), search=search, read=lambda ids: aread_nodes(store, ids))
        return await asyncio.to_thread(sealed._ranked, query, clean, sealed._as_hits(found))


#: The reader of each answering kind, by :attr:`~textcrafter_rag.sealed.engine.SearchMode.answered_by`.
ANSWERS: dict[str, type[Answers]] = {"engine": EngineAnswers, "store": StoreAnswers}
