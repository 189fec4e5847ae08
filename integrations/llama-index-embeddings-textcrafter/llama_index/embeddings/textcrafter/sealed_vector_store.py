"""``SealedVectorStore``: a LlamaIndex vector store that holds only sealed nodes.

Stores that keep text (``stores_text=True``: Qdrant, Chroma, Milvus, ...) write each node into
their payload, and LlamaIndex's ``node_to_metadata_dict`` puts the *whole* node there as JSON
(``_node_content``): its text, all its metadata, and its relationships, whose ``SOURCE`` entry
carries the source document's metadata and hash. Sealing only the text would leave all of that.

So this wrapper hands the store a *shell* node per node: its embedding, the keyed id of the node
and of its source document (for ``delete(ref_doc_id)``: UUIDs under the key and tenant that name
nothing, :meth:`~textcrafter_rag.sealed.records.RecordSealer.keyed_id`; ``record_ids="clear"`` keeps
your ids), the metadata fields not named in ``sealed_metadata`` (so the store can filter on them), and
as text one AES-256-GCM token sealing the complete original node (``doc_to_json``, your ids included),
bound to the shell's id. Query results are opened back into the original nodes, of their original type,
with your ids. Nothing else about the node reaches the store.

Stores that keep no text (``stores_text=False``: FAISS) only get the shells' vectors and ids;
their text lives in the index's docstore, which :func:`.sealed_storage.sealed_storage_context`
seals. Filtering on a sealed field is impossible (the field is not in the store), and so are
text, sparse and hybrid query modes over sealed texts.

**Sealed search** (:mod:`textcrafter_rag.sealed.core`): give the store your ``ProtectedEmbedding`` as
``embed_model=`` (read through its base, as LangChain's store reads ``ProtectedEmbeddings``) or embed with
:class:`~.base.SealedEmbedding`; no clean vector reaches LlamaIndex's handlers. The clean embedding travels
sealed in the shell (``_tc_vec``); every query ranks the opened shells by exact cosine. Three modes:

* store-held index (``search=StoreIndexSearch()``, the default for a new store that can read by id): each
  shell carries a keyed random vector (the store ranks nothing), and the sealed index lives in the store
  itself (its write log, :mod:`textcrafter_rag.sealed`), so any process with the key searches at once; it
  reads ``open_k`` shells by id (``get_nodes``);
* candidates (``search=TwoStageSearch(...)``): each shell carries a rotated, heavily noised candidate vector; a
  protected query brings at most ``open_k`` shells back;
* app-side index (``search=AppIndexSearch(...)``): as the store-held index, but the index is a file of
  this process.

All need a store that keeps payloads. A store that cannot read by id (or keeps no text) keeps the previous
default, single-stage (the store ranks the nodes' embeddings), with a :class:`StoreRanksWarning` once. A
store written before opens in the mode it was written in (its marker record names it; a store written
single-stage, which has none, is recognised by its records).

The mode a new store gets is chosen in :mod:`._mode_choice`; the deletes, clears and rebuilds that keep an
index mode's index in step with the store are in :mod:`._index_upkeep`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from textcrafter_rag.deprecation import renamed_keyword
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed.candidates import VECTOR_KEY, TwoStageSearch
from textcrafter_rag.sealed.core import (
    DIM_KEY,
    MARKER_KEY,
    MODE_KEY,
    SealedSearch,
    SearchOptions,
    StoreRanksWarning,
)
from textcrafter_rag.sealed.engine import add_records, arun, run
from textcrafter_rag.sealed.layout import CHUNKS_FIELD, LOG_FIELD, is_library_record
from textcrafter_rag.sealed.marker import StoreMarker
from textcrafter_rag.sealed.records import ID_FIELD, IDS_KEY, RecordSealer, canonical_record_id
from textcrafter_rag.sealing import NotPicklable, SealError, SecretKey
from textcrafter_rag.validation import check_int

from ._index_upkeep import SealedIndexUpkeep
from ._mode_choice import (
    _FROM_FETCH_K,
    check_search,
    clean_node_vectors,
    default_search,
    named_search,
    reading_model,
    search_factory,
    warn_unprotected,
)
from ._port import LlamaIndexPort, aread_nodes, read_nodes
from ._sealed_ids import SealedNodeIds
from ._sealed_steps import Hit, SealedSearchSteps, one_more
from .instrumentation import warn_unless_silent

__all__ = ["NODE_FIELD", "SealedVectorStore", "StoreRanksWarning"]

#: Field name the whole node is sealed under.
NODE_FIELD = "node"
#: Plain fields the sealed store adds to each shell or to its own records (the marker, the index log).
_RESERVED = (VECTOR_KEY, MODE_KEY, MARKER_KEY, IDS_KEY, DIM_KEY, LOG_FIELD, CHUNKS_FIELD)


# NotPicklable first: LlamaIndex's own __getstate__ would silently drop the key holders and pickle the rest
class SealedVectorStore(NotPicklable, SealedNodeIds, SealedSearchSteps, SealedIndexUpkeep, BasePydanticVectorStore):
    """Wrap a LlamaIndex vector store so it stores only sealed nodes (plus the plain metadata fields).

    Example:
        >>> inner = QdrantVectorStore(client=client, collection_name="docs")
        >>> store = SealedVectorStore(inner, key=os.environ["TEXTCRAFTER_KEY"], sealed_metadata=("author",))
        >>> index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store),
        ...                          embed_model=ProtectedEmbedding())

    Args:
        store: The vector store to wrap.
        key: 32 bytes or their URL-safe base64 string (``textcrafter keygen``). Never in a repr,
            error or log.
        sealed_metadata: Metadata fields kept out of the store (they live only inside the sealed
            node); the others are also stored plain, for filters.
        tenant: Tenant or collection name mixed into the key (``context=``: its deprecated name, warned).
        fetch_k: Deprecated (warned): ``search=TwoStageSearch(open_k=...)``.
        search: The sealed search mode's options: a
            :class:`~textcrafter_rag.sealed.StoreIndexSearch` (the store-held index), a ``TwoStageSearch``,
            an :class:`~textcrafter_rag.sealed.app_index.AppIndexSearch` (the app-side index file; both index modes
            need ``get_nodes``), or ``None``: single-stage, the store ranks with the nodes' embeddings.
            Neither given: ``StoreIndexSearch()`` for a store that keeps payloads and reads by id, else
            single-stage with a :class:`StoreRanksWarning`; a store written before opens in the mode its
            marker names (or single-stage, recognised by its records), since nothing else can read it.
        strict: Raise on a shell that does not open instead of skipping and counting it (:attr:`skipped`).
        embed_model: Sealed search: the index's model (a ``ProtectedEmbedding``, read through its base, or a
            ``SealedEmbedding``); the store embeds each query itself with it, so LlamaIndex's retriever never
            puts the clean query vector on the query bundle its spans carry (``is_embedding_query=False``).
        record_ids: ``"keyed"`` (default): the wrapped store holds node and source-document ids as keyed
            UUIDs (HMAC under the key and tenant), linking no stored record to a known text; ``get_nodes``,
            ``delete``, ``delete_nodes`` and query results use your ids. ``"clear"``: your ids themselves,
            for external systems keyed by them; weaker. A store that keeps no text (``stores_text=False``:
            FAISS, ``SimpleVectorStore``) answers queries with ids alone, which LlamaIndex's index maps to
            its nodes: it holds sealed ids (deterministic AES-SIV under the key), turned back into yours.
        legacy_clear_ids: The store may hold shells under your clear ids (written by a release before ids
            were keyed, or with ``record_ids="clear"``): ids not found under their keyed (or sealed) ids are
            looked up under the clear ones, which the store then receives. Off by default: then no clear id is
            ever sent, and nothing the store holds turns it on.

    Raises:
        TypeError: ``sealed_metadata`` is a string.
        ValueError: A sealed-search mode with a store that keeps no payloads (``stores_text=False``, e.g. FAISS).
        textcrafter_rag.sealing.InvalidKeyError: The key is not 32 bytes or their base64 string.

    A node that does not open (wrong key or tenant, edited, or moved to another id) raises
    :class:`~textcrafter_rag.sealing.SealError`; a shell is never returned as a node. Stores written with
    clear ids (the previous release, or ``record_ids="clear"``) still open and search; reading and deleting
    them by id takes ``legacy_clear_ids=True`` (an id not found under its keyed id is then looked up under the
    clear one, which is sent to the store, and ``delete(ref_doc_id)`` deletes under both).
    ``add`` returns your node ids.
    ``stores_text`` mirrors the wrapped store's, so the index keeps using the docstore for stores
    that keep no text: seal that docstore too (:func:`sealed_storage_context`).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    _store: BasePydanticVectorStore = PrivateAttr()
    _records: RecordSealer = PrivateAttr()
    _search: SealedSearch = PrivateAttr()
    _marker_id: str = PrivateAttr(default="")
    _marker_checked: bool = PrivateAttr(default=False)
    _embed_model: Any = PrivateAttr(default=None)
    #: ``embed_model`` was a ``ProtectedEmbedding``: node vectors it made are re-read through its base.
    _reread: bool = PrivateAttr(default=False)
    _ids_scheme: str | None = PrivateAttr(default=None)
    _port: LlamaIndexPort = PrivateAttr()
    #: Builds the core for a mode's options (the mode a store written before names replaces the default).
    _new_search: Callable[[SearchOptions], SealedSearch] = PrivateAttr()
    #: The mode was not chosen by the caller: the store's marker (or records) may still name another.
    _adopt: bool = PrivateAttr(default=False)

    def __init__(
        self,
        store: BasePydanticVectorStore,
        *,
        key: bytes | str | SecretKey,
        sealed_metadata: Sequence[str] = (),
        tenant: str = "",
        fetch_k: int | TwoStageSearch | None = None,
        search: SearchOptions | None = _FROM_FETCH_K,
        strict: bool = False,
        embed_model: Any = None,
        record_ids: str = "keyed",
        legacy_clear_ids: bool = False,
        context: str | None = None,
    ) -> None:
        tenant = renamed_keyword(tenant, context, new="tenant=", old="SealedVectorStore(context=)", default="")
        if not isinstance(store, BasePydanticVectorStore):
            raise InvalidTypeError(f"store must be a LlamaIndex BasePydanticVectorStore, got {type(store).__name__}")
        defaulted = search is _FROM_FETCH_K and fetch_k is None
        search = default_search(store) if defaulted else named_search(fetch_k, search)
        check_search(store, search, embed_model)
        embeds_queries = store.is_embedding_query and embed_model is None
        super().__init__(stores_text=store.stores_text, is_embedding_query=embeds_queries)
        secret = SecretKey(key)
        self._embed_model, self._reread = reading_model(embed_model, search, secret)
        self._store = store
        # A store that keeps no text answers queries with ids alone, which the index maps to its nodes: it gets
        # sealed ids, which the key turns back into the nodes' own (keyed UUIDs cannot be turned back).
        ids = "sealed" if record_ids == "keyed" and not store.stores_text else record_ids
        self._records = RecordSealer(
            secret, sealed_metadata=sealed_metadata, tenant=tenant, record_ids=ids, legacy_clear_ids=legacy_clear_ids
        )
        self._port = LlamaIndexPort(store)
        self._new_search = search_factory(secret, tenant=tenant, strict=strict, port=self._port)
        self._search = self._new_search(search)
        self._adopt = defaulted and self._search.indexes is not None  # the default where the store reads by id
        self._store_marker = StoreMarker(secret, tenant=tenant)
        self._marker_id = self._store_marker.id

    @classmethod
    def class_name(cls) -> str:
        return "SealedVectorStore"

    @property
    def store(self) -> BasePydanticVectorStore:
        """The wrapped store (it holds shells; reading from it directly returns ciphertext)."""
        return self._store

    @property
    def client(self) -> Any:
        """The wrapped store's client."""
        return self._store.client

    @property
    def sealed_metadata(self) -> tuple[str, ...]:
        """The metadata fields kept out of the store."""
        return self._records.sealed_metadata

    @property
    def search_options(self) -> SearchOptions:
        """The search mode's options (``SingleStageSearch()`` for single-stage search)."""
        return self._search.options

    @property
    def two_stage(self) -> TwoStageSearch | None:
        """The candidate search options, or ``None`` (single-stage, or the app-side index)."""
        options = self.search_options
        return options if isinstance(options, TwoStageSearch) else None

    # -- sealing and opening ---------------------------------------------------------------------

    def seal_node(self, node: BaseNode) -> TextNode:
        """The shell the wrapped store gets for ``node``: id, embedding, source id, plain metadata, sealed node."""
        return self._shells([node])[0][0]

    def _shell(self, node: BaseNode, embedding: list[float] | None, extra: dict[str, Any]) -> TextNode:
        sid = self._records.store_id(node.node_id)
        rid = canonical_record_id(sid)
        token = self._records.seal_value(
            doc_to_json(node.model_copy(update={"embedding": None})), record_id=rid, field=NODE_FIELD
        )
        relationships = {}
        if node.ref_doc_id is not None:
            relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=self._records.store_id(node.ref_doc_id))
        reserved = [k for k in _RESERVED if k in node.metadata]
        if reserved:
            raise InvalidInputError(f"node {rid!r}: metadata field {reserved[0]!r} is reserved for the sealed store")
        metadata = {**self._records.plain_metadata(node.metadata), ID_FIELD: rid, **extra}
        if rid != canonical_record_id(node.node_id):  # the id scheme, for the audit (the node's own id is sealed)
            metadata[IDS_KEY] = self._records.record_ids
        return TextNode(id_=sid, text=token, metadata=metadata, relationships=relationships, embedding=embedding)

    def open_node(self, shell: BaseNode, *, store_id: Any = None) -> BaseNode:
        """The original node sealed in ``shell``, with the shell's embedding.

        Raises:
            SealError: The shell's text is not a sealed node under this key, context and id.
        """
        rid = RecordSealer.resolve_record_id(store_id, (shell.metadata or {}).get(ID_FIELD, shell.node_id))
        data = self._records.open_value(
            shell.get_content(metadata_mode=MetadataMode.NONE), record_id=rid, field=NODE_FIELD
        )
        try:
            node = json_to_doc(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise SealError(f"node {rid!r} opened but is not a serialised node ({type(exc).__name__})") from None
        self._records.user_id(rid, node.node_id)  # the shell's id is the node's keyed id (or, written clear, itself)
        node.embedding = shell.embedding
        return node

    def _open_result(self, result: VectorStoreQueryResult) -> VectorStoreQueryResult:
        if result.nodes is None:  # ids alone (a store that keeps no text): sealed ids back to yours
            ids_back = [self._records.ids.opened_id(i) or i for i in result.ids] if result.ids is not None else None
            return VectorStoreQueryResult(similarities=result.similarities, ids=ids_back)
        ids: Sequence[Any] = result.ids if result.ids and len(result.ids) == len(result.nodes) else []
        keep = [i for i, n in enumerate(result.nodes) if not is_library_record(n.metadata)]  # no marker, no log
        nodes = [self.open_node(result.nodes[i], store_id=ids[i] if ids else None) for i in keep]
        scores = result.similarities
        similarities = [scores[i] for i in keep] if scores and len(scores) == len(result.nodes) else scores
        return VectorStoreQueryResult(nodes=nodes, similarities=similarities, ids=[n.node_id for n in nodes])

    def _shells(self, nodes: Sequence[BaseNode]) -> tuple[list[BaseNode], np.ndarray | None]:
        """The shells for ``nodes``, and (sealed search) their validated clean vectors."""
        if self._search.search_mode.store_ranks:  # single-stage: the store ranks the nodes' own embeddings
            return [self._shell(n, n.embedding, {}) for n in nodes], None
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidInputError(f"sealed search needs each node's embedding; {len(missing)} node(s) have none")
        if not nodes:
            return [], None
        vectors = clean_node_vectors(nodes, self._embed_model, self._reread)
        clean = self._search.check_vectors(vectors, name="node embeddings")
        warn_unless_silent(vectors, what="node embeddings", stacklevel=4)
        ids = [canonical_record_id(self._records.store_id(n.node_id)) for n in nodes]
        vectors = self._search.store_vectors(clean, ids)
        shells = [self._shell(n, v.tolist(), {}) for n, v in zip(nodes, vectors, strict=True)]
        fields = self._search.record_fields(clean, ids, [s.text for s in shells])  # the vector binds its shell
        for shell, extra in zip(shells, fields, strict=True):
            shell.metadata.update(extra)
        return shells, clean

    def _check(self, filters: MetadataFilters | None, store_kwargs: Mapping[str, Any] | None = None) -> None:
        # one rule for both frameworks (sealed_records): MetadataFilters, then every filter-like store keyword
        self._records.check_filter(filters)
        self._records.check_store_kwargs(store_kwargs or {})

    # -- the vector store protocol (deletes and clears: SealedIndexUpkeep) ----------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add the shells of ``nodes`` (the nodes themselves are not modified).

        In an index mode the index entries are written first (for the store-held index, its log in the
        store): a crash before the store took the shells leaves entries without records, which searches
        skip and count, never a stored record that no search finds.
        """
        self._open_mode(_dim_of(nodes))
        if self._search.search_mode.store_ranks:
            warn_unprotected(nodes)
        shells, clean = self._shells(nodes)
        self._marker(write=False)
        self._check_writable()
        steps = add_records(self._search, [s.node_id for s in shells], clean)  # no index (single-stage): the add
        out = run(steps, write=lambda: self._store.add(shells, **add_kwargs))
        self._marker(write=True, dim=_dim_of(nodes))
        return self._added_ids(out, shells, nodes)

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Async :meth:`add`."""
        await asyncio.to_thread(self._open_mode, _dim_of(nodes))
        if self._search.search_mode.store_ranks:
            warn_unprotected(nodes)
        shells, clean = self._shells(nodes)
        await self._amarker(write=False)
        await asyncio.to_thread(self._check_writable)
        steps = add_records(self._search, [s.node_id for s in shells], clean)
        out = await arun(steps, write=lambda: self._store.async_add(shells, **kwargs))
        await self._amarker(write=True, dim=_dim_of(nodes))
        return self._added_ids(out, shells, nodes)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The wrapped store's query, its nodes opened (stores that keep no text return ids only).

        In sealed search the result holds the best ``similarity_top_k`` by exact cosine (those are its
        similarities): from the ``open_k`` candidates the store found, or ``open_k`` shells read by id.
        """
        self._check(query.filters, kwargs)
        check_int(query.similarity_top_k, name="similarity_top_k", low=1, high=1 << 31)  # every mode, before the store
        query = self._mapped_query(query)  # node_ids= / doc_ids= (the retriever's) as the store holds them
        self._open_mode(_dim_of_query(query))
        if self._search.search_mode.store_ranks:  # single-stage: the store's own query answers
            self._marker(write=False)
            return self._own_result(query, self._store.query(one_more(query), **kwargs))
        if query.query_embedding is None and self._embed_model is not None and query.query_str:
            query = dataclasses.replace(query, query_embedding=self._embed_model.get_query_embedding(query.query_str))
        clean = self._clean_query(query)
        self._marker(write=False)
        found = run(
            self._find(query, clean, kwargs),
            search=lambda vector, n: self._hits(self._store.query(self._candidate_query(query, vector, n), **kwargs)),
            read=lambda ids: read_nodes(self._store, ids),
        )
        return self._ranked(query, clean, self._as_hits(found))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Async :meth:`query`."""
        self._check(query.filters, kwargs)
        check_int(query.similarity_top_k, name="similarity_top_k", low=1, high=1 << 31)  # every mode, before the store
        query = self._mapped_query(query)  # node_ids= / doc_ids= (the retriever's) as the store holds them
        await asyncio.to_thread(self._open_mode, _dim_of_query(query))
        if self._search.search_mode.store_ranks:
            await self._amarker(write=False)
            return self._own_result(query, await self._store.aquery(one_more(query), **kwargs))
        if query.query_embedding is None and self._embed_model is not None and query.query_str:
            embedding = await self._embed_model.aget_query_embedding(query.query_str)
            query = dataclasses.replace(query, query_embedding=embedding)
        clean = self._clean_query(query)
        await self._amarker(write=False)

        async def search(vector: list[float], n: int) -> list[Hit]:
            return self._hits(await self._store.aquery(self._candidate_query(query, vector, n), **kwargs))

        found = await arun(
            self._find(query, clean, kwargs), search=search, read=lambda ids: aread_nodes(self._store, ids)
        )
        return await asyncio.to_thread(self._ranked, query, clean, self._as_hits(found))

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The wrapped store's nodes (your ids, mapped to the store's), opened."""
        self._check(filters)
        if node_ids is None:
            nodes = self._store.get_nodes(None, filters)
            return [self.open_node(n) for n in nodes if not is_library_record(n.metadata)]
        return [self.open_node(n) for n in self._find_shells(node_ids, filters)]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Async :meth:`get_nodes`."""
        self._check(filters)
        if node_ids is None:
            nodes = await self._store.aget_nodes(None, filters)
            return [self.open_node(n) for n in nodes if not is_library_record(n.metadata)]
        return [self.open_node(n) for n in await self._afind_shells(node_ids, filters)]

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Persist the wrapped store (it only ever held shells)."""
        self._store.persist(persist_path, fs=fs)

    def __repr__(self) -> str:
        return (
            f"SealedVectorStore(store={type(self._store).__name__}, sealed_metadata={self.sealed_metadata!r}, "
            f"search={self.search_options!r}, key=<redacted>)"
        )


def _dim_of(nodes: Sequence[BaseNode]) -> int | None:
    """The dimension of the nodes' embeddings (``None`` if the first has none)."""
    return len(nodes[0].embedding) if nodes and nodes[0].embedding is not None else None


def _dim_of_query(query: VectorStoreQuery) -> int | None:
    """The dimension of the query's embedding (``None`` if it has none yet)."""
    return len(query.query_embedding) if query.query_embedding is not None else None
