"""``SealedVectorStore``: any LangChain vector store, holding only ciphertext for texts and chosen metadata.

Each text, and each metadata field you name, is sealed with AES-256-GCM (the record id bound as associated
data; :mod:`textcrafter_rag.sealed.records`) before the wrapped store sees it, and opened on the way out. The
sealed store builds the wrapped store itself, with embeddings (:mod:`.sealed_embeddings`) that answer for each
sealed text with the vector the sealed store chose, so nothing patches the store you built.

Sealed search (:mod:`textcrafter_rag.sealed.core`): every record carries its clean vector sealed, and your
process ranks the opened records by exact cosine. Modes, chosen by ``search=``:

* the store-held index (:class:`~textcrafter_rag.sealed.StoreIndexSearch`, the default where the store reads
  by id): the store holds a keyed random vector per record and ranks nothing; the sealed index lives in the
  store (:mod:`textcrafter_rag.sealed.log`), so every process with the key searches it;
* candidates (:class:`~textcrafter_rag.sealed.candidates.TwoStageSearch`, the default where it cannot): the store
  ranks heavily noised vectors and returns records in rounds to an expected recall;
* the app-side index file (:class:`~textcrafter_rag.sealed.app_index.AppIndexSearch`), and single-stage
  (``search=None``: the store ranks the vectors of ``embedding``; protect them).

Record ids are keyed (:mod:`._ids`): the store holds a UUID per record that names nothing.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.deprecation import renamed_keyword, warn_renamed
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, VECTOR_KEY, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch, SearchOptions, StoreRanksWarning
from textcrafter_rag.sealed.engine import add_records, arun, run
from textcrafter_rag.sealed.layout import RESERVED_FIELDS, guarded_filters, is_library_record
from textcrafter_rag.sealed.marker import StoreMarker
from textcrafter_rag.sealed.modes import MODES, SingleStageSearch, check_store, mode_of
from textcrafter_rag.sealed.records import RecordSealer, new_record_id
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import NotPicklable, SecretKey
from textcrafter_rag.validation import check_int

from ._answers import ANSWERS
from ._copy import copy_records
from ._ids import SealedIds
from ._index_upkeep import SealedIndexUpkeep
from ._milvus import MilvusReads, milvus_reads_by_id
from ._port import LangChainPort
from ._reading import STORE_ID_FIELD, SealedReading, has_get_by_ids, store_id_field
from .sealed_embeddings import adopted_embeddings, build_wrapped

__all__ = ["STORE_ID_FIELD", "SealedVectorStore"]

#: ``search=`` and ``fetch_k=`` left out: the store-held index (candidates where the store cannot read by id).
_FROM_FETCH_K: Any = object()
_DEFAULT: Any = object()
#: Plain fields the sealed store adds to each record; removed before a record is opened.
_RESERVED = (VECTOR_KEY, *RESERVED_FIELDS)


#: What builds the wrapped store: called once with the embeddings it must be built with.
StoreFactory = Callable[[Embeddings], VectorStore]


class SealedVectorStore(NotPicklable, SealedIds, SealedReading, SealedIndexUpkeep):
    """A LangChain ``VectorStore`` that stores only sealed texts (and sealed named metadata).

    Example:
        >>> store = SealedVectorStore(InMemoryVectorStore, embedding=OpenAIEmbeddings(), key=KEY,
        ...                           sealed_metadata=("author",))    # the store-held index: the store ranks nothing
        >>> store.as_retriever().invoke("who moved to Leeds?")      # decrypted documents

    Args:
        store: A function that builds the store to hold the records from the embeddings it is given
            (``InMemoryVectorStore`` itself, or ``lambda e: QdrantVectorStore(..., embedding=e)``,
            ``lambda e: FAISS.load_local(path, e, ...)``); the store must keep those embeddings (they
            answer for sealed texts with their plaintext's vector). Or the :attr:`store` of another
            sealed store, to open the same records under another key or tenant.
        embedding: The user's embeddings: documents and queries are embedded with it, in this process. In
            sealed search a ``ProtectedEmbeddings`` is read through its base encoder (the store protects).
        key: 32 bytes or their URL-safe base64 string, as printed by ``textcrafter keygen`` (or a
            :class:`~textcrafter_rag.sealing.SecretKey`). Parsed once; never in a repr, error or log.
        sealed_metadata: Metadata fields to encrypt; the others stay plain and filterable.
        tenant: Tenant or collection name mixed into the key: documents sealed under one tenant do not
            open under another (``context=``: its deprecated name, warned).
        fetch_k: Deprecated (warned): an int is ``search=TwoStageSearch(open_k=...)``, ``None`` is ``search=None``.
        search: The mode's options. Left out: :class:`~textcrafter_rag.sealed.StoreIndexSearch` (the store-held
            index) where the store reads by id, else the candidate rounds
            (:data:`~textcrafter_rag.sealed.candidates.DEFAULT_SEARCH`, warned); a store its marker says was written
            in candidates or the app-side index opens in that mode (single-stage must be named). A
            ``TwoStageSearch`` (candidates), an ``AppIndexSearch`` (the index in a local file), or
            ``SingleStageSearch()`` (``None`` too: the store ranks the vectors of ``embedding``: protect them).
        strict: Raise on a hit that does not open instead of skipping and counting it (:attr:`skipped`).
        record_ids: ``"keyed"`` (default): the wrapped store holds each record under a keyed UUID of its id
            (HMAC under the key and tenant), which links no stored record to a known text; reads and
            ``get_by_ids``/``delete`` use your ids. ``"clear"``: your ids themselves, for external systems
            keyed by them; weaker (meaningful ids give a thief known (text, stored vector) pairs).
        legacy_clear_ids: The store may hold records under your clear ids (written by a release before ids
            were keyed, or with ``record_ids="clear"``): an id not found under its keyed id is looked up under
            the clear one, which the store then receives. Off by default: then no clear id is ever sent, and
            nothing the store holds turns it on.

    Raises:
        TypeError: ``store`` is neither a factory nor a sealed store's store, the factory's store does
            not keep the embeddings it was given, or ``sealed_metadata`` is a string.
        ValueError: Both ``fetch_k`` and ``search``, or the app-side index on a store without ``get_by_ids``.
        textcrafter_rag.sealing.InvalidKeyError: The key is not 32 bytes or their base64 string.

    Every hit is opened with the id the store returns (``Document.id``, else ``langchain_qdrant``'s
    ``_id`` or ``langchain_milvus``'s primary-key field), checked against the plain ``_tc_id`` field,
    so values copied to another record do not open. In sealed search a hit that does not open is skipped
    and counted (``strict=True`` raises :class:`~textcrafter_rag.sealing.SealError`); ciphertext is never
    returned as text. Other methods of the wrapped store (``FAISS.save_local``) are reached through :attr:`store`.

    In sealed search scores are the exact cosine similarity of the clean vectors (higher is closer),
    for every search; ``k`` may not exceed ``open_k``. The store never receives a clean vector.
    A store written in one mode refuses to be opened in another (a marker record holds the mode).
    """

    def __init__(
        self,
        store: StoreFactory | VectorStore,
        *,
        key: bytes | str | SecretKey,
        embedding: Embeddings | None = None,
        sealed_metadata: Sequence[str] = (),
        tenant: str = "",
        fetch_k: int | TwoStageSearch | None = _DEFAULT,
        search: SearchOptions | None = _FROM_FETCH_K,
        strict: bool = False,
        record_ids: str = "keyed",
        legacy_clear_ids: bool = False,
        context: str | None = None,
    ) -> None:
        secret = SecretKey(key)
        tenant = renamed_keyword(tenant, context, new="tenant=", old="SealedVectorStore(context=)", default="")
        ids = {"record_ids": record_ids, "legacy_clear_ids": legacy_clear_ids}
        self._records = RecordSealer(secret, sealed_metadata=sealed_metadata, tenant=tenant, **ids)
        self._default_mode = search is _FROM_FETCH_K and fetch_k is _DEFAULT
        if self._default_mode:
            search = StoreIndexSearch()  # or candidates, for a store that cannot read by id (below)
        elif search is _FROM_FETCH_K:
            warn_renamed("SealedVectorStore(fetch_k=...)", "search=TwoStageSearch(open_k=...) (search=None for None)")
            search = TwoStageSearch.of(fetch_k)
        elif fetch_k is not _DEFAULT:
            raise InvalidInputError("give either fetch_k= or search=, not both")
        search = SingleStageSearch() if search is None else search
        embedding = adopted_embeddings(store, embedding)
        answers = ANSWERS[mode_of(search).answered_by]
        answers.check_embedding(embedding, secret)  # before the store is built
        self._embedding: Embeddings = embedding
        self._secret, self._context, self._strict = secret, tenant, strict
        self._store_marker = StoreMarker(secret, tenant=tenant)
        self._marker_id = self._store_marker.id
        self._marker_checked = False
        inner, shim = build_wrapped(store, embedding, query=self._wrapped_query, aquery=self._awrapped_query)
        # langchain-milvus reads no ids itself
        inner = milvus_reads_by_id(inner, sealed=answers.reads_records)
        reads_by_id = has_get_by_ids(inner)
        if self._default_mode and not reads_by_id:
            warnings.warn(
                f"{type(inner).__name__} cannot read records by id, so sealed search falls back to candidates: the "
                "store ranks heavily noised vectors, which an attacker who can have its own texts stored can compare "
                "with (see SECURITY.md); pass search= to choose a mode and silence this",
                StoreRanksWarning,
                stacklevel=2,
            )
            search = DEFAULT_SEARCH
        check_store(mode_of(search), store=type(inner).__name__, reads_by_id=reads_by_id, reader="it has no get_by_ids")
        self._store, self._shim, self._id_field = inner, shim, store_id_field(inner)
        self._use(search)

    def _use(self, search: SearchOptions, *, adopted: bool = False) -> None:
        """Search in the mode of these options (at construction, or the mode an existing store was written in:
        ``adopted``): its core, and the reader of its answering kind (:mod:`._answers`), the one lookup by mode."""
        if adopted:
            ANSWERS[mode_of(search).answered_by].check_embedding(self._embedding, self._secret)
        self._search = SealedSearch(self._secret, tenant=self._context, options=search, strict=self._strict)
        self._answers = ANSWERS[self._search.search_mode.answered_by](self, self._embedding)
        port = LangChainPort(self._store, self._shim, id_field=self._id_field)
        # a replica (StoreIndexSearch(replica=True)) keeps records as get_by_ids returns them: a query opens the
        # same Documents it would have read from the store, without reading them
        self._search.attach(port, fetch=self._store.get_by_ids, fields=self._hit_fields)

    @staticmethod
    def _adopts(written: str) -> bool:
        """Whether a store written in mode ``written`` opens in it when no mode was named (:attr:`Answers.adopted`)."""
        return ANSWERS[MODES[written].answered_by].adopted

    def _wrapped_query(self, text: str) -> list[float]:
        """What the wrapped store receives for a query text, if its own search is called (:attr:`store`)."""
        return self._answers.store_query(text)

    async def _awrapped_query(self, text: str) -> list[float]:
        return await self._answers.astore_query(text)

    @property
    def store(self) -> VectorStore:
        """The wrapped store (it holds ciphertext; reading from it directly returns ciphertext)."""
        return self._store.store if isinstance(self._store, MilvusReads) else self._store

    @property
    def embeddings(self) -> Embeddings:
        """The user's embeddings (documents and queries are embedded with them, as plaintext, in this process)."""
        return self._embedding

    @property
    def sealed_metadata(self) -> tuple[str, ...]:
        """The metadata fields that are encrypted."""
        return self._records.sealed_metadata

    @property
    def record_ids(self) -> str:
        """``"keyed"`` (the store holds keyed ids) or ``"clear"`` (the store holds your ids)."""
        return self._records.record_ids

    @property
    def search_options(self) -> SearchOptions:
        """The search mode's options (``SingleStageSearch()`` for single-stage search)."""
        return self._search.options

    @property
    def two_stage(self) -> TwoStageSearch | None:
        """Deprecated (warned): :attr:`search_options`, which names every mode."""
        warn_renamed("SealedVectorStore.two_stage", "SealedVectorStore.search_options")
        options = self.search_options
        return options if isinstance(options, TwoStageSearch) else None

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
        self,
        documents: Sequence[Document],
        ids: Sequence[Any] | None,
        clean: np.ndarray | None,
        *,
        seeds: Sequence[bytes | None] | None = None,
    ) -> tuple[list[Document], list[Any], list[Any], list[list[float]] | None]:
        """The sealed documents, the user's ids, the store's ids, and (sealed search) the store's vectors.

        ``seeds``: the noise seeds of copied records (:meth:`copy_to`), so a copy is not a second draw.
        """
        given = list(ids) if ids is not None else [d.id for d in documents]
        if len(given) != len(documents):
            raise InvalidInputError(f"got {len(given)} ids for {len(documents)} documents")
        record_ids = [new_record_id() if i is None or i == "" else i for i in given]
        sealed, store_ids = [], []
        for doc, rid in zip(documents, record_ids, strict=True):
            reserved = [k for k in _RESERVED if k in (doc.metadata or {})]
            if reserved:
                raise InvalidInputError(f"metadata field {reserved[0]!r} is reserved for the sealed store")
            rec = self._records.seal(doc.page_content, doc.metadata, record_id=rid)
            sid = rec.store_id
            store_ids.append(sid)
            sealed.append(
                Document(id=sid if isinstance(sid, str) else None, page_content=rec.text, metadata=rec.metadata)
            )
        if clean is None:
            return sealed, record_ids, store_ids, None
        fields = self._search.record_fields(clean, store_ids, [d.page_content for d in sealed], seeds=seeds)
        for doc, extra in zip(sealed, fields, strict=True):
            doc.metadata.update(extra)
        return sealed, record_ids, store_ids, self._search.store_vectors(clean, store_ids, seeds=seeds).tolist()

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Embed the plaintexts (one encoder call), seal texts and named metadata, add them to the wrapped store.

        Ids come from ``ids=`` or each ``Document.id``; documents with neither get a UUID4, which
        is passed to the wrapped store (every sealed value is bound to its record's id).
        """
        if not documents:
            return []
        vectors = self._search.check_vectors(self._answers.clean.documents([d.page_content for d in documents]))
        return self._add(documents, kwargs.pop("ids", None), vectors, kwargs)

    def _add(
        self,
        documents: Sequence[Document],
        ids: Sequence[Any] | None,
        vectors: np.ndarray,
        kwargs: dict,
        *,
        seeds: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        self._marker(write=True, dim=vectors.shape[1])
        sealed, record_ids, store_ids, store_vectors = self._seal(documents, ids, vectors, seeds=seeds)
        with self._shim.registered(dict(zip((d.page_content for d in sealed), store_vectors, strict=True))):
            out = run(
                add_records(self._search, store_ids, vectors),
                write=lambda: self._store.add_documents(sealed, ids=store_ids, **kwargs),
            )
        return self._user_ids(out, store_ids, record_ids)

    def copy_to(
        self,
        target: SealedVectorStore,
        ids: Sequence[Any],
        *,
        delete_source: bool = False,
        batch_size: int = 100,
        progress: bool = False,
        **kwargs: Any,
    ) -> list[str]:
        """Open these records and add them to ``target``: rekeying, a new tenant, another collection.

        Sealed search to sealed search, no text goes through an encoder: the clean vectors are opened and
        sealed again under the target's key. Each copy's candidate is drawn with the noise seed sealed in
        its source record (not re-derived from the opened, int8-rounded vector): under the same key it is
        the candidate ``add_texts`` of the text gives, and under any key it is the source's draw, rotated
        for the target, so a copy and its source give nothing to average. **A copy leaves the source in
        place**: whoever holds both stores holds two releases of each record (under two keys). Pass
        ``delete_source=True`` (a move: the records are deleted here once ``target`` took them all), or
        delete the source collection. Any number of ids: copied ``batch_size`` at a time (at most the records a
        search opens), with a progress bar if ``progress``; a failed batch leaves the earlier ones copied.

        Raises:
            SealError: A record does not open under this store's key (nothing is written then).
            ValueError: Some ids are not in this store.
        """
        return copy_records(
            self, target, ids, delete_source=delete_source, batch_size=batch_size, progress=progress, kwargs=kwargs
        )

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Async :meth:`add_documents` (the embeddings' native async path, then the store's)."""
        if not documents:
            return []
        vectors = self._search.check_vectors(await self._answers.clean.adocuments([d.page_content for d in documents]))
        await asyncio.to_thread(self._marker, write=True, dim=vectors.shape[1])
        sealed, ids, store_ids, store_vectors = await asyncio.to_thread(
            self._seal, documents, kwargs.pop("ids", None), vectors
        )
        with self._shim.registered(dict(zip((d.page_content for d in sealed), store_vectors or [], strict=True))):
            out = await arun(
                add_records(self._search, store_ids, vectors),
                write=lambda: self._store.aadd_documents(sealed, ids=store_ids, **kwargs),
            )
        return self._user_ids(out, store_ids, ids)

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

    # -- opening ---------------------------------------------------------------------------------

    def _store_id(self, doc: Document) -> Any:
        return doc.id if doc.id is not None else doc.metadata.get(self._id_field)

    def _open(self, doc: Document) -> Document:
        metadata = {k: v for k, v in doc.metadata.items() if k not in _RESERVED}
        rec = self._records.open(doc.page_content, metadata, store_id=self._store_id(doc))
        if rec.metadata.get(self._id_field) is not None and rec.record_id != rec.store_id:
            rec.metadata[self._id_field] = rec.record_id  # the store's own id field (Qdrant _id, Milvus pk): yours
        return Document(id=rec.record_id, page_content=rec.text, metadata=rec.metadata)

    def _opened(self, docs: Iterable[Document]) -> list[Document]:
        return [self._open(d) for d in docs if not is_library_record(d.metadata)]  # never the marker or index log

    def _opened_scored(self, pairs: Iterable[tuple[Document, float]]) -> list[tuple[Document, float]]:
        return [(self._open(d), s) for d, s in pairs if not is_library_record(d.metadata)]

    def _check(self, kwargs: dict[str, Any], *, k: Any = 1) -> None:
        check_int(k, name="k", low=1, high=1 << 31)  # in every mode, single-stage too: before the store is asked
        # every filter-like keyword (filter=, Milvus expr=, Chroma where=...), by the rule both adapters share; a
        # callable filter (InMemoryVectorStore, FAISS) is wrapped: the library's own records never reach it
        self._records.check_store_kwargs(kwargs)
        kwargs.update(guarded_filters(kwargs))

    def _get_retriever_tags(self) -> list[str]:
        return [type(self).__name__, type(self._store).__name__, type(self._embedding).__name__]

    def __repr__(self) -> str:
        name, sealed, search = type(self._store).__name__, self.sealed_metadata, self.search_options
        return f"SealedVectorStore(store={name}, sealed_metadata={sealed!r}, search={search!r}, key=<redacted>)"
