"""``SealedVectorStore``: any LangChain vector store, holding only ciphertext for texts and chosen metadata.

A protected vector stored beside its plaintext protects nothing: whoever reads the store reads the
text. This wrapper encrypts each document's text, and the metadata fields you name, with AES-256-GCM
(a fresh nonce per value, the document id bound as associated data; see
:mod:`textcrafter_rag.sealed_records`) before the wrapped store sees them, and decrypts every hit on
the way out. The sealed store builds the wrapped store itself, from a function you give it, handing
it embeddings (:mod:`.sealed_embeddings`) that answer for each sealed text with the vector of its
plaintext; so retrieval works as on an unwrapped store and nothing patches the store you built.

**Two-stage search** (the default; ``fetch_k=None`` turns it off; :mod:`textcrafter_rag.two_stage`): the
store receives heavily noised candidate vectors and protected queries, the clean vectors travel sealed in
the payload, and every search opens ``fetch_k`` candidates and ranks them by exact cosine in your process.

Plain by design: the vectors the store receives (protect them with :class:`ProtectedEmbeddings` or
two-stage search), the ids, the metadata fields not in ``sealed_metadata`` (filterable) and the reserved
``_tc_*`` fields. Filters on sealed fields and lexical/hybrid search over sealed texts cannot work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed_records import RecordSealer, new_record_id
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.two_stage import DEFAULT_FETCH_K, VECTOR_KEY, TwoStage, TwoStageSearch, rerank

from .candidate_search import CandidateSearch
from .sealed_embeddings import SealedTextEmbeddings

__all__ = ["STORE_ID_FIELD", "SealedVectorStore"]

#: Where stores that leave ``Document.id`` empty put the point id of a hit (``langchain_qdrant``).
STORE_ID_FIELD = "_id"


def _store_id_field(store: VectorStore) -> str:
    """Where a hit's id is if ``Document.id`` is empty: ``langchain_milvus``'s ``_primary_field``, else ``_id``."""
    primary = getattr(store, "_primary_field", None)
    return primary if isinstance(primary, str) and primary else STORE_ID_FIELD


#: What builds the wrapped store: called once with the embeddings it must be built with.
StoreFactory = Callable[[Embeddings], VectorStore]


class SealedVectorStore(VectorStore):
    """A LangChain ``VectorStore`` that stores only sealed texts (and sealed named metadata).

    Example:
        >>> store = SealedVectorStore(InMemoryVectorStore, embedding=OpenAIEmbeddings(), key=KEY,
        ...                           sealed_metadata=("author",))                # two-stage search
        >>> store.as_retriever().invoke("who moved to Leeds?")      # decrypted documents
        >>> SealedVectorStore(lambda e: QdrantVectorStore(client=client, collection_name="docs", embedding=e),
        ...                   embedding=ProtectedEmbeddings(base=OpenAIEmbeddings()), key=KEY, fetch_k=None)

    Args:
        store: A function that builds the store to hold the records from the embeddings it is given
            (``InMemoryVectorStore`` itself, or ``lambda e: QdrantVectorStore(..., embedding=e)``,
            ``lambda e: FAISS.load_local(path, e, ...)``); the store must keep those embeddings (they
            answer for sealed texts with their plaintext's vector). Or the :attr:`store` of another
            sealed store, to open the same records under another key or context.
        embedding: The user's embeddings: documents and queries are embedded with it, in this process.
        key: 32 bytes or their URL-safe base64 string, as printed by ``textcrafter keygen``. Never
            stored in a repr, error or log.
        sealed_metadata: Metadata fields to encrypt; the others stay plain and filterable.
        context: Tenant or collection name mixed into the key: documents sealed under one context
            do not open under another.
        fetch_k: Two-stage search: candidates fetched per query (an int, default 200, with the default
            candidate and query strengths), or a :class:`~textcrafter_rag.two_stage.TwoStageSearch`.
            ``None``: single-stage, the store ranks with the vectors of ``embedding`` (protect them).

    Raises:
        TypeError: ``store`` is neither a factory nor a sealed store's store, the factory's store does
            not keep the embeddings it was given, or ``sealed_metadata`` is a string.
        textcrafter_rag.sealing.InvalidKeyError: The key is not 32 bytes or their base64 string.

    Every hit is opened with the id the store returns (``Document.id``, else ``langchain_qdrant``'s
    ``_id`` or ``langchain_milvus``'s primary-key field), checked against the plain ``_tc_id`` field,
    so values copied to another record do not open. A value that does not open (wrong key or context,
    edited, moved) raises :class:`~textcrafter_rag.sealing.SealError`; ciphertext is never returned as
    text. Other methods of the wrapped store (``FAISS.save_local``) are reached through :attr:`store`.

    In two-stage search scores are the exact cosine similarity of the clean vectors (higher is closer),
    for every search; ``k`` may not exceed ``fetch_k``. The store never receives a clean vector.
    """

    def __init__(
        self,
        store: StoreFactory | VectorStore,
        *,
        key: bytes | str | SecretKey,
        embedding: Embeddings | None = None,
        sealed_metadata: Sequence[str] = (),
        context: str = "",
        fetch_k: int | TwoStageSearch | None = DEFAULT_FETCH_K,
    ) -> None:
        self._records = RecordSealer(key, sealed_metadata=sealed_metadata, context=context)
        search = TwoStageSearch.of(fetch_k)
        adopted = store.embeddings if isinstance(store, VectorStore) else None
        if isinstance(store, VectorStore):
            if not isinstance(adopted, SealedTextEmbeddings):
                raise InvalidTypeError(
                    f"pass a function that builds the store from the embeddings it is given, e.g. "
                    f"SealedVectorStore(lambda e: {type(store).__name__}(..., embedding=e), embedding=..., key=KEY), "
                    "or the .store of another SealedVectorStore: a store built with other embeddings would embed "
                    "the ciphertext"
                )
            if embedding is not None and embedding is not adopted.inner:
                raise InvalidTypeError("embedding must be the one the wrapped store's sealed store was built with")
            embedding = adopted.inner
        elif not callable(store):
            raise InvalidTypeError(f"store must be a function building a VectorStore, got {type(store).__name__}")
        if not isinstance(embedding, Embeddings):
            raise InvalidTypeError(f"embedding must be LangChain Embeddings, got {type(embedding).__name__}")
        self._embedding: Embeddings = embedding
        self._search = (
            CandidateSearch(TwoStage(key, context=context, search=search), embedding) if search is not None else None
        )
        if isinstance(adopted, SealedTextEmbeddings):
            shim, inner = adopted, store
        else:
            if self._search is not None:
                shim = SealedTextEmbeddings(embedding, query=self._search.store_query, aquery=self._search.astore_query)
            else:
                shim = SealedTextEmbeddings(embedding)
            inner = store(shim)
            if not isinstance(inner, VectorStore) or inner.embeddings is not shim:
                raise InvalidTypeError(
                    "the store function must return a LangChain VectorStore built with the embeddings it is given "
                    "(e.g. lambda e: QdrantVectorStore(client=client, collection_name='docs', embedding=e))"
                )
        self._store = inner
        self._shim = shim
        self._id_field = _store_id_field(inner)

    @property
    def store(self) -> VectorStore:
        """The wrapped store (it holds ciphertext; reading from it directly returns ciphertext)."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        """The user's embeddings (documents and queries are embedded with them, as plaintext, in this process)."""
        return self._embedding

    @property
    def sealed_metadata(self) -> tuple[str, ...]:
        """The metadata fields that are encrypted."""
        return self._records.sealed_metadata

    @property
    def two_stage(self) -> TwoStageSearch | None:
        """The two-stage search options, or ``None`` for single-stage search."""
        return self._search.two_stage.search if self._search is not None else None

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, **kwargs: Any
    ) -> SealedVectorStore:
        """Build a sealed store (``store=`` and ``key=`` required, other keywords too) and add ``texts`` (``ids=``)."""
        ids = kwargs.pop("ids", None)
        if "store" not in kwargs or "key" not in kwargs:
            raise InvalidTypeError("SealedVectorStore.from_texts needs store= (a function building the store) and key=")
        sealed = cls(kwargs.pop("store"), embedding=embedding, **kwargs)
        sealed.add_texts(texts, metadatas, ids=ids)
        return sealed

    # -- writing ---------------------------------------------------------------------------------

    def _seal(
        self, documents: Sequence[Document], ids: Sequence[Any] | None, clean: np.ndarray | None
    ) -> tuple[list[Document], list[Any], list[list[float]] | None]:
        given = list(ids) if ids is not None else [d.id for d in documents]
        if len(given) != len(documents):
            raise InvalidInputError(f"got {len(given)} ids for {len(documents)} documents")
        record_ids = [new_record_id() if i is None or i == "" else i for i in given]
        sealed = []
        for doc, rid in zip(documents, record_ids, strict=True):
            if VECTOR_KEY in (doc.metadata or {}):
                raise InvalidInputError(f"metadata field {VECTOR_KEY!r} is reserved for the sealed vector")
            rec = self._records.seal(doc.page_content, doc.metadata, record_id=rid)
            sealed.append(
                Document(id=rid if isinstance(rid, str) else None, page_content=rec.text, metadata=rec.metadata)
            )
        if clean is None or self._search is None:
            return sealed, record_ids, None
        return sealed, record_ids, self._search.seal(sealed, clean, record_ids, [d.page_content for d in documents])

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Embed the plaintexts (one encoder call), seal texts and named metadata, add them to the wrapped store.

        Ids come from ``ids=`` or each ``Document.id``; documents with neither get a UUID4, which
        is passed to the wrapped store (every sealed value is bound to its record's id).
        """
        if not documents:
            return []
        texts = [d.page_content for d in documents]
        clean = self._search.documents(texts) if self._search is not None else None
        return self._add(documents, kwargs.pop("ids", None), clean, kwargs)

    def _add(
        self, documents: Sequence[Document], ids: Sequence[Any] | None, clean: np.ndarray | None, kwargs: dict
    ) -> list[str]:
        sealed, record_ids, vectors = self._seal(documents, ids, clean)
        if vectors is None:
            vectors = self._embedding.embed_documents([d.page_content for d in documents])
        with self._shim.registered(dict(zip((d.page_content for d in sealed), vectors, strict=True))):
            return self._store.add_documents(sealed, ids=record_ids, **kwargs)

    def copy_to(self, target: SealedVectorStore, ids: Sequence[Any], **kwargs: Any) -> list[str]:
        """Open these records and add them to ``target``: rekeying, a new tenant context, another collection.

        Two-stage to two-stage, no text goes through an encoder: the clean vectors are opened and sealed
        again under the target's key, with its candidate vectors; otherwise ``target`` embeds the texts.
        Copy into a new collection and drop the old one after, so nothing is lost if the copy stops.

        Raises:
            SealError: A record does not open under this store's key (nothing is written then).
            ValueError: Some ids are not in this store.
        """
        raw = self._store.get_by_ids(list(ids))
        if len(raw) != len(ids):
            raise InvalidInputError(f"{len(ids) - len(raw)} of the {len(ids)} ids are not in this store")
        opened = [self._open(d) for d in raw]
        record_ids = [d.id for d in opened]
        if self._search is not None and target._search is not None:
            clean = self._search.open_vectors(raw, self._store_id)
            return target._add(opened, record_ids, clean, kwargs)
        return target.add_documents(opened, ids=record_ids, **kwargs)

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Async :meth:`add_documents` (the embeddings' native async path, then the store's)."""
        if not documents:
            return []
        texts = [d.page_content for d in documents]
        if self._search is not None:
            clean = await self._search.adocuments(texts)
            sealed, ids, vectors = await asyncio.to_thread(self._seal, documents, kwargs.pop("ids", None), clean)
        else:
            sealed, ids, _ = self._seal(documents, kwargs.pop("ids", None), None)
            vectors = await self._embedding.aembed_documents(texts)
        with self._shim.registered(dict(zip((d.page_content for d in sealed), vectors, strict=True))):
            return await self._store.aadd_documents(sealed, ids=ids, **kwargs)

    @staticmethod
    def _documents(texts: Iterable[str], metadatas: list[dict] | None) -> list[Document]:
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise InvalidInputError(f"got {len(metadatas)} metadatas for {len(texts)} texts")
        metas = metadatas if metadatas is not None else [{}] * len(texts)
        return [Document(page_content=t, metadata=dict(m or {})) for t, m in zip(texts, metas, strict=True)]

    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[Any] | None = None, **kwargs: Any
    ) -> list[str]:
        """:meth:`add_documents` for texts (and optional metadatas and ids)."""
        return self.add_documents(self._documents(texts, metadatas), ids=ids, **kwargs)

    async def aadd_texts(
        self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[Any] | None = None, **kwargs: Any
    ) -> list[str]:
        """Async :meth:`add_texts`."""
        return await self.aadd_documents(self._documents(texts, metadatas), ids=ids, **kwargs)

    def delete(self, ids: list[Any] | None = None, **kwargs: Any) -> bool | None:
        """Delete from the wrapped store (ids are not sealed)."""
        return self._store.delete(ids, **kwargs)

    async def adelete(self, ids: list[Any] | None = None, **kwargs: Any) -> bool | None:
        """Async :meth:`delete`."""
        return await self._store.adelete(ids, **kwargs)

    # -- opening ---------------------------------------------------------------------------------

    def _store_id(self, doc: Document) -> Any:
        return doc.id if doc.id is not None else doc.metadata.get(self._id_field)

    def _open(self, doc: Document) -> Document:
        metadata = {k: v for k, v in doc.metadata.items() if k != VECTOR_KEY}
        rec = self._records.open(doc.page_content, metadata, store_id=self._store_id(doc))
        return Document(id=rec.record_id, page_content=rec.text, metadata=rec.metadata)

    def _opened(self, docs: Iterable[Document]) -> list[Document]:
        return [self._open(d) for d in docs]

    def _opened_scored(self, pairs: Iterable[tuple[Document, float]]) -> list[tuple[Document, float]]:
        return [(self._open(d), s) for d, s in pairs]

    def _check(self, kwargs: Mapping[str, Any]) -> None:
        self._records.check_filter(kwargs.get("filter"))

    def get_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """The documents with these ids, opened."""
        return self._opened(self._store.get_by_ids(ids))

    async def aget_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """Async :meth:`get_by_ids`."""
        return self._opened(await self._store.aget_by_ids(ids))

    # -- two-stage search --------------------------------------------------------------------------

    def _candidates(self) -> CandidateSearch:
        assert self._search is not None  # two-stage paths only
        return self._search

    def _ranked(self, query: np.ndarray, hits: list[Document], k: int) -> list[tuple[Document, float]]:
        if not hits:
            return []
        order, scores = rerank(query, self._candidates().open_vectors(hits, self._store_id), k)
        return [(self._open(hits[i]), s) for i, s in zip(order, scores, strict=True)]

    def _mmr(self, query: np.ndarray, hits: list[Document], k: int, lambda_mult: float) -> list[Document]:
        if not hits:
            return []
        vectors = self._candidates().open_vectors(hits, self._store_id).tolist()
        return [self._open(hits[i]) for i in maximal_marginal_relevance(query, vectors, lambda_mult=lambda_mult, k=k)]

    # -- reading ---------------------------------------------------------------------------------

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a plaintext query (store-specific ``filter`` etc. pass through), opened."""
        return [d for d, _ in self.similarity_search_with_score(query, k=k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search`."""
        return [d for d, _ in await self.asimilarity_search_with_score(query, k=k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Hits with scores (the wrapped store's, or the exact cosine in two-stage search), opened."""
        self._check(kwargs)
        if self._search is None:
            return self._opened_scored(self._store.similarity_search_with_score(query, k=k, **kwargs))
        clean = self._candidates().query(query)
        return self._ranked(clean, self._candidates().fetch(self._store, clean, k, query, **kwargs), k)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score`."""
        self._check(kwargs)
        if self._search is None:
            return self._opened_scored(await self._store.asimilarity_search_with_score(query, k=k, **kwargs))
        clean = await self._candidates().aquery(query)
        hits = await self._candidates().afetch(self._store, clean, k, query, **kwargs)
        return await asyncio.to_thread(self._ranked, clean, hits, k)

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Hits with relevance scores (the wrapped store's in [0, 1], or the exact cosine), opened."""
        self._check(kwargs)
        if self._search is None:
            return self._opened_scored(self._store.similarity_search_with_relevance_scores(query, k=k, **kwargs))
        return super().similarity_search_with_relevance_scores(query, k=k, **kwargs)

    async def asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_relevance_scores`."""
        self._check(kwargs)
        if self._search is None:
            return self._opened_scored(await self._store.asimilarity_search_with_relevance_scores(query, k=k, **kwargs))
        return await super().asimilarity_search_with_relevance_scores(query, k=k, **kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a query vector (in two-stage search a clean one: it is protected before the store sees it)."""
        self._check(kwargs)
        if self._search is None:
            return self._opened(self._store.similarity_search_by_vector(embedding, k=k, **kwargs))
        clean = np.asarray(embedding, dtype=np.float32)
        return [d for d, _ in self._ranked(clean, self._candidates().fetch(self._store, clean, k, None, **kwargs), k)]

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search_by_vector`."""
        self._check(kwargs)
        if self._search is None:
            return self._opened(await self._store.asimilarity_search_by_vector(embedding, k=k, **kwargs))
        clean = np.asarray(embedding, dtype=np.float32)
        hits = await self._candidates().afetch(self._store, clean, k, None, **kwargs)
        return [d for d, _ in await asyncio.to_thread(self._ranked, clean, hits, k)]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR: the wrapped store's, or over the opened candidates' clean vectors (the store's ``fetch_k``)."""
        self._check(kwargs)
        if self._search is None:
            return self._opened(self._store.max_marginal_relevance_search(query, k, fetch_k, lambda_mult, **kwargs))
        clean = self._candidates().query(query)
        return self._mmr(clean, self._candidates().fetch(self._store, clean, k, query, **kwargs), k, lambda_mult)

    async def amax_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search`."""
        self._check(kwargs)
        if self._search is None:
            return self._opened(
                await self._store.amax_marginal_relevance_search(query, k, fetch_k, lambda_mult, **kwargs)
            )
        clean = await self._candidates().aquery(query)
        hits = await self._candidates().afetch(self._store, clean, k, query, **kwargs)
        return await asyncio.to_thread(self._mmr, clean, hits, k, lambda_mult)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR for a query vector, hits opened."""
        self._check(kwargs)
        if self._search is None:
            hits = self._store.max_marginal_relevance_search_by_vector(embedding, k, fetch_k, lambda_mult, **kwargs)
            return self._opened(hits)
        clean = np.asarray(embedding, dtype=np.float32)
        return self._mmr(clean, self._candidates().fetch(self._store, clean, k, None, **kwargs), k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search_by_vector`."""
        self._check(kwargs)
        if self._search is None:
            store = self._store
            return self._opened(
                await store.amax_marginal_relevance_search_by_vector(embedding, k, fetch_k, lambda_mult, **kwargs)
            )
        clean = np.asarray(embedding, dtype=np.float32)
        hits = await self._candidates().afetch(self._store, clean, k, None, **kwargs)
        return await asyncio.to_thread(self._mmr, clean, hits, k, lambda_mult)

    def _select_relevance_score_fn(self) -> Any:
        return self._store._select_relevance_score_fn() if self._search is None else (lambda cosine: cosine)

    def _get_retriever_tags(self) -> list[str]:
        return [type(self).__name__, type(self._store).__name__, type(self._embedding).__name__]

    def __repr__(self) -> str:
        two_stage = f", two_stage={self.two_stage!r}" if self._search is not None else ""
        name, sealed = type(self._store).__name__, self.sealed_metadata
        return f"SealedVectorStore(store={name}, sealed_metadata={sealed!r}{two_stage}, key=<redacted>)"
