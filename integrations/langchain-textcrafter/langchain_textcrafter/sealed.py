"""``SealedVectorStore``: any LangChain vector store, holding only ciphertext for texts and chosen metadata.

A protected vector stored beside its plaintext protects nothing: whoever reads the store reads the
text. This wrapper encrypts each document's text, and the metadata fields you name, with AES-256-GCM
(a fresh nonce per value, the document id bound as associated data; see
:mod:`textcrafter_rag.sealed_records`) before the wrapped store sees them, and decrypts every hit on
the way out. The vectors are computed from the plaintexts, by the store's own embeddings, before
sealing (:mod:`.sealed_embeddings`), so retrieval works as on the unwrapped store.

What stays plain, by design: the vectors (protect them with :class:`ProtectedEmbeddings`), the ids,
the metadata fields not named in ``sealed_metadata`` (so the store can filter on them), and the
reserved ``_tc_id`` field. Filtering on a sealed field is impossible: the store only holds its
ciphertext. Lexical/sparse/hybrid retrieval over sealed texts is impossible for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.sealed_records import RecordSealer, filter_field_names, new_record_id
from textcrafter_rag.sealing import SecretKey

from .sealed_embeddings import SealedTextEmbeddings, install_sealed_embeddings

__all__ = ["STORE_ID_FIELD", "SealedVectorStore"]

#: Where stores that leave ``Document.id`` empty put the point id of a hit (``langchain_qdrant``).
STORE_ID_FIELD = "_id"


def _store_id_field(store: VectorStore) -> str:
    """The metadata field holding a hit's id when ``Document.id`` is empty.

    ``langchain_milvus`` returns the primary key under its ``_primary_field`` ("pk" by default);
    ``langchain_qdrant`` under ``_id``. Reading the store's own field lets a moved record be caught there too.
    """
    primary = getattr(store, "_primary_field", None)
    return primary if isinstance(primary, str) and primary else STORE_ID_FIELD


def _filter_keys(flt: Any) -> list[str]:
    """Field names in a store filter of any form: dicts, Qdrant ``models.Filter``, string expressions...

    One definition for both frameworks: :func:`textcrafter_rag.sealed_records.filter_field_names`.
    """
    return sorted(filter_field_names(flt))


class SealedVectorStore(VectorStore):
    """Wrap a LangChain ``VectorStore`` so it stores only sealed texts (and sealed named metadata).

    Example:
        >>> embeddings = ProtectedEmbeddings()                       # protected vectors
        >>> inner = QdrantVectorStore(client=client, collection_name="docs", embedding=embeddings)
        >>> store = SealedVectorStore(inner, key=os.environ["TEXTCRAFTER_KEY"], sealed_metadata=("author",))
        >>> store.add_documents(docs)                                # ciphertext + protected vectors
        >>> store.as_retriever().invoke("who moved to Leeds?")      # decrypted documents

    Args:
        store: The store to wrap, built with the embeddings to use. Its embeddings are routed
            through the wrapper (the attribute holding ``store.embeddings`` is replaced by a
            :class:`~langchain_textcrafter.sealed_embeddings.SealedTextEmbeddings`, which passes
            plain texts and queries through unchanged).
        key: 32 bytes or their URL-safe base64 string, as printed by ``textcrafter keygen``. Never
            stored in a repr, error or log.
        sealed_metadata: Metadata fields to encrypt; the others stay plain and filterable.
        context: Tenant or collection name mixed into the key: documents sealed under one context
            do not open under another.

    Raises:
        TypeError: The store exposes no replaceable ``embeddings``; ``sealed_metadata`` is a string.
        textcrafter_rag.sealing.InvalidKeyError: The key is not 32 bytes or their base64 string.

    Every hit is opened with the id the store returns (``Document.id``, else the ``_id`` metadata
    field that ``langchain_qdrant`` fills with the point id, or the primary-key field of
    ``langchain_milvus``, "pk" by default), checked against the plain ``_tc_id``
    field, so a record's values copied to another point do not open; ``_tc_id`` alone is used
    for stores that return no id at all.
    A value that does not open (wrong key or context, edited, moved to another record) raises
    :class:`~textcrafter_rag.sealing.SealError`; ciphertext is never returned as text. Methods of
    the wrapped store not listed here (``FAISS.save_local``, ``add_embeddings``) are reached through
    :attr:`store`; texts written that way are not sealed.
    """

    def __init__(
        self,
        store: VectorStore,
        *,
        key: bytes | str | SecretKey,
        sealed_metadata: Sequence[str] = (),
        context: str = "",
    ) -> None:
        if not isinstance(store, VectorStore):
            raise TypeError(f"store must be a LangChain VectorStore, got {type(store).__name__}")
        self._records = RecordSealer(key, sealed_metadata=sealed_metadata, context=context)
        self._store = store
        self._shim: SealedTextEmbeddings = install_sealed_embeddings(store)
        self._id_field = _store_id_field(store)

    @property
    def store(self) -> VectorStore:
        """The wrapped store (it holds ciphertext; reading from it directly returns ciphertext)."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings the wrapped store was built with (documents are embedded as plaintext)."""
        return self._shim.inner

    @property
    def sealed_metadata(self) -> tuple[str, ...]:
        """The metadata fields that are encrypted."""
        return self._records.sealed_metadata

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, **kwargs: Any
    ) -> SealedVectorStore:
        """Not supported: a sealed store wraps a store you build (with its client, collection, index).

        Build the wrapped store, wrap it, then add: ``SealedVectorStore(FAISS(...), key=KEY).add_texts(texts)``.
        """
        raise NotImplementedError(
            "SealedVectorStore.from_texts is not supported: build the store to wrap (e.g. FAISS(embedding_function="
            "..., index=..., docstore=InMemoryDocstore(), index_to_docstore_id={}) or QdrantVectorStore(client=..., "
            "...)), wrap it with SealedVectorStore(store, key=KEY) and call add_texts/add_documents"
        )

    # -- writing ---------------------------------------------------------------------------------

    def _seal(self, documents: Sequence[Document], ids: Sequence[Any] | None) -> tuple[list[Document], list[Any]]:
        given = list(ids) if ids is not None else [d.id for d in documents]
        if len(given) != len(documents):
            raise ValueError(f"got {len(given)} ids for {len(documents)} documents")
        record_ids = [new_record_id() if i is None or i == "" else i for i in given]
        sealed = []
        for doc, rid in zip(documents, record_ids, strict=True):
            rec = self._records.seal(doc.page_content, doc.metadata, record_id=rid)
            sealed.append(
                Document(id=rid if isinstance(rid, str) else None, page_content=rec.text, metadata=rec.metadata)
            )
        return sealed, record_ids

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Embed the plaintexts, seal texts and named metadata, add them to the wrapped store.

        Ids come from ``ids=`` or each ``Document.id``; documents with neither get a UUID4, which
        is passed to the wrapped store (every sealed value is bound to its record's id).
        """
        if not documents:
            return []
        sealed, ids = self._seal(documents, kwargs.pop("ids", None))
        vectors = self.embeddings.embed_documents([d.page_content for d in documents])
        with self._shim.registered(dict(zip((d.page_content for d in sealed), vectors, strict=True))):
            return self._store.add_documents(sealed, ids=ids, **kwargs)

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Async :meth:`add_documents` (the embeddings' native async path, then the store's)."""
        if not documents:
            return []
        sealed, ids = self._seal(documents, kwargs.pop("ids", None))
        vectors = await self.embeddings.aembed_documents([d.page_content for d in documents])
        with self._shim.registered(dict(zip((d.page_content for d in sealed), vectors, strict=True))):
            return await self._store.aadd_documents(sealed, ids=ids, **kwargs)

    @staticmethod
    def _documents(texts: Iterable[str], metadatas: list[dict] | None) -> list[Document]:
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"got {len(metadatas)} metadatas for {len(texts)} texts")
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

    # -- reading ---------------------------------------------------------------------------------

    def _open(self, doc: Document) -> Document:
        store_id = doc.id if doc.id is not None else doc.metadata.get(self._id_field)
        rec = self._records.open(doc.page_content, doc.metadata, store_id=store_id)
        return Document(id=rec.record_id, page_content=rec.text, metadata=rec.metadata)

    def _opened(self, docs: Iterable[Document]) -> list[Document]:
        return [self._open(d) for d in docs]

    def _opened_scored(self, pairs: Iterable[tuple[Document, float]]) -> list[tuple[Document, float]]:
        return [(self._open(d), s) for d, s in pairs]

    def _check(self, kwargs: Mapping[str, Any]) -> None:
        self._records.check_filter_keys(_filter_keys(kwargs.get("filter")))

    def get_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """The documents with these ids, opened."""
        return self._opened(self._store.get_by_ids(ids))

    async def aget_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """Async :meth:`get_by_ids`."""
        return self._opened(await self._store.aget_by_ids(ids))

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The wrapped store's search (plaintext query, store-specific ``filter`` etc.), hits opened."""
        self._check(kwargs)
        return self._opened(self._store.similarity_search(query, k=k, **kwargs))

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search`."""
        self._check(kwargs)
        return self._opened(await self._store.asimilarity_search(query, k=k, **kwargs))

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Hits with the wrapped store's scores, opened."""
        self._check(kwargs)
        return self._opened_scored(self._store.similarity_search_with_score(query, k=k, **kwargs))

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_score`."""
        self._check(kwargs)
        return self._opened_scored(await self._store.asimilarity_search_with_score(query, k=k, **kwargs))

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Hits with relevance scores in [0, 1] as the wrapped store computes them, opened."""
        self._check(kwargs)
        return self._opened_scored(self._store.similarity_search_with_relevance_scores(query, k=k, **kwargs))

    async def asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_relevance_scores`."""
        self._check(kwargs)
        return self._opened_scored(await self._store.asimilarity_search_with_relevance_scores(query, k=k, **kwargs))

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Hits for a query vector, opened."""
        self._check(kwargs)
        return self._opened(self._store.similarity_search_by_vector(embedding, k=k, **kwargs))

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """Async :meth:`similarity_search_by_vector`."""
        self._check(kwargs)
        return self._opened(await self._store.asimilarity_search_by_vector(embedding, k=k, **kwargs))

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """The wrapped store's MMR search (it works on vectors, not texts), hits opened."""
        self._check(kwargs)
        hits = self._store.max_marginal_relevance_search(query, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, **kwargs)
        return self._opened(hits)

    async def amax_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search`."""
        self._check(kwargs)
        hits = await self._store.amax_marginal_relevance_search(
            query, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, **kwargs
        )
        return self._opened(hits)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR for a query vector, hits opened."""
        self._check(kwargs)
        hits = self._store.max_marginal_relevance_search_by_vector(
            embedding, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, **kwargs
        )
        return self._opened(hits)

    async def amax_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`max_marginal_relevance_search_by_vector`."""
        self._check(kwargs)
        hits = await self._store.amax_marginal_relevance_search_by_vector(
            embedding, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, **kwargs
        )
        return self._opened(hits)

    def _select_relevance_score_fn(self) -> Any:
        return self._store._select_relevance_score_fn()

    def _get_retriever_tags(self) -> list[str]:
        return [type(self).__name__, type(self._store).__name__, type(self.embeddings).__name__]

    def __repr__(self) -> str:
        return (
            f"SealedVectorStore(store={type(self._store).__name__}, sealed_metadata={self.sealed_metadata!r}, "
            "key=<redacted>)"
        )
