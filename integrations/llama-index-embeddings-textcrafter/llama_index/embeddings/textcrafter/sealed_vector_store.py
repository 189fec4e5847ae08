"""``SealedVectorStore``: a LlamaIndex vector store that holds only sealed nodes.

Stores that keep text (``stores_text=True``: Qdrant, Chroma, Milvus, ...) write each node into
their payload, and LlamaIndex's ``node_to_metadata_dict`` puts the *whole* node there as JSON
(``_node_content``): its text, all its metadata, and its relationships, whose ``SOURCE`` entry
carries the source document's metadata and hash. Sealing only the text would leave all of that.

So this wrapper hands the store a *shell* node per node: same id and embedding, the source
document's id (for ``delete(ref_doc_id)``), the metadata fields not named in ``sealed_metadata``
(so the store can filter on them), and as text one AES-256-GCM token sealing the complete
original node (``doc_to_json``), bound to the node id. Query results are opened back into the
original nodes, of their original type. Nothing else about the node reaches the store.

Stores that keep no text (``stores_text=False``: FAISS) only get the shells' vectors and ids;
their text lives in the index's docstore, which :func:`.sealed_storage.sealed_storage_context`
seals. Filtering on a sealed field is impossible (the field is not in the store), and so are
text, sparse and hybrid query modes over sealed texts.

**Two-stage search** (``fetch_k=``; :mod:`textcrafter_rag.two_stage`): give the index the *plain*
encoder; each shell then carries a keyed candidate vector (heavy noise) instead of the node's
embedding, and the clean embedding travels sealed in the shell's metadata (``_tc_vec``). A query
reaches the store protected, ``fetch_k`` shells come back, and their sealed vectors are opened and
ranked by exact cosine with the clean query in this process. It needs a store that keeps payloads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed_records import ID_FIELD, RecordSealer, canonical_record_id
from textcrafter_rag.sealing import NotPicklable, SealError, SecretKey
from textcrafter_rag.two_stage import VECTOR_KEY, TwoStage, TwoStageSearch, rerank

__all__ = ["NODE_FIELD", "SealedVectorStore"]

#: Field name the whole node is sealed under.
NODE_FIELD = "node"


# NotPicklable first: LlamaIndex's own __getstate__ would silently drop the key holders and pickle the rest
class SealedVectorStore(NotPicklable, BasePydanticVectorStore):
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
        context: Tenant or collection name mixed into the key.
        fetch_k: Two-stage search: candidates fetched per query (an int, with the default strengths, or a
            :class:`~textcrafter_rag.two_stage.TwoStageSearch`); the index must then embed with the plain
            encoder. ``None`` (default): the store ranks with the nodes' embeddings.

    Raises:
        TypeError: ``sealed_metadata`` is a string.
        ValueError: ``fetch_k`` with a store that keeps no payloads (``stores_text=False``, e.g. FAISS).
        textcrafter_rag.sealing.InvalidKeyError: The key is not 32 bytes or their base64 string.

    A node that does not open (wrong key or context, edited, or moved to another id) raises
    :class:`~textcrafter_rag.sealing.SealError`; a shell is never returned as a node.
    ``stores_text`` mirrors the wrapped store's, so the index keeps using the docstore for stores
    that keep no text: seal that docstore too (:func:`sealed_storage_context`).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    _store: BasePydanticVectorStore = PrivateAttr()
    _records: RecordSealer = PrivateAttr()
    _two_stage: TwoStage | None = PrivateAttr(default=None)

    def __init__(
        self,
        store: BasePydanticVectorStore,
        *,
        key: bytes | str | SecretKey,
        sealed_metadata: Sequence[str] = (),
        context: str = "",
        fetch_k: int | TwoStageSearch | None = None,
    ) -> None:
        if not isinstance(store, BasePydanticVectorStore):
            raise InvalidTypeError(f"store must be a LlamaIndex BasePydanticVectorStore, got {type(store).__name__}")
        search = TwoStageSearch.of(fetch_k)
        if search is not None and not store.stores_text:
            raise InvalidInputError(
                f"two-stage search needs a vector store that keeps payloads; {type(store).__name__} keeps only "
                "vectors (stores_text=False), so the sealed clean vectors would have nowhere to go"
            )
        super().__init__(stores_text=store.stores_text, is_embedding_query=store.is_embedding_query)
        self._store = store
        self._records = RecordSealer(key, sealed_metadata=sealed_metadata, context=context)
        self._two_stage = TwoStage(key, context=context, search=search) if search is not None else None

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
    def two_stage(self) -> TwoStageSearch | None:
        """The two-stage search options, or ``None`` for single-stage search."""
        return self._two_stage.search if self._two_stage is not None else None

    # -- sealing and opening ---------------------------------------------------------------------

    def seal_node(self, node: BaseNode) -> TextNode:
        """The shell the wrapped store gets for ``node``: id, embedding, source id, plain metadata, sealed node."""
        return self._shells([node])[0]

    def _shell(self, node: BaseNode, embedding: list[float] | None, extra: dict[str, Any]) -> TextNode:
        rid = canonical_record_id(node.node_id)
        token = self._records.seal_value(
            doc_to_json(node.model_copy(update={"embedding": None})), record_id=rid, field=NODE_FIELD
        )
        relationships = {}
        if node.ref_doc_id is not None:
            relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=node.ref_doc_id)
        if VECTOR_KEY in node.metadata:
            raise InvalidInputError(f"node {rid!r}: metadata field {VECTOR_KEY!r} is reserved for the sealed vector")
        metadata = {**self._records.plain_metadata(node.metadata), ID_FIELD: rid, **extra}
        return TextNode(
            id_=node.node_id, text=token, metadata=metadata, relationships=relationships, embedding=embedding
        )

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
        node.embedding = shell.embedding
        return node

    def _open_result(self, result: VectorStoreQueryResult) -> VectorStoreQueryResult:
        if result.nodes is None:
            return result
        ids: Sequence[Any] = result.ids if result.ids and len(result.ids) == len(result.nodes) else []
        nodes = [self.open_node(n, store_id=ids[i] if ids else None) for i, n in enumerate(result.nodes)]
        return VectorStoreQueryResult(nodes=nodes, similarities=result.similarities, ids=result.ids)

    def _shells(self, nodes: Sequence[BaseNode]) -> list[BaseNode]:
        if self._two_stage is None:
            return [self._shell(n, n.embedding, {}) for n in nodes]
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidInputError(f"two-stage search needs each node's embedding; {len(missing)} node(s) have none")
        if not nodes:
            return []
        clean = np.asarray([n.embedding for n in nodes], dtype=np.float32)
        ids = [canonical_record_id(n.node_id) for n in nodes]
        texts = [n.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        candidates = self._two_stage.protect_documents(clean, record_ids=ids, texts=texts)
        return [
            self._shell(n, candidate.tolist(), {VECTOR_KEY: self._two_stage.seal_vector(vector, record_id=rid)})
            for n, candidate, vector, rid in zip(nodes, candidates, clean, ids, strict=True)
        ]

    def _store_query(self, query: VectorStoreQuery) -> tuple[VectorStoreQuery, np.ndarray | None]:
        """What the wrapped store is asked: in two-stage search, a protected query for ``fetch_k`` candidates."""
        if self._two_stage is None:
            return query, None
        if query.query_embedding is None:
            raise InvalidInputError("two-stage search needs a query embedding (text-only modes cannot be re-ranked)")
        if query.mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            raise InvalidInputError(f"two-stage search supports the default and MMR modes, not {query.mode.value!r}")
        fetch_k = self._two_stage.search.fetch_k
        if query.similarity_top_k > fetch_k:
            raise InvalidInputError(
                f"similarity_top_k={query.similarity_top_k} exceeds this store's fetch_k={fetch_k}: raise fetch_k"
            )
        clean = np.asarray(query.query_embedding, dtype=np.float32)
        protected = self._two_stage.protect_query(clean, text=query.query_str)[0].tolist()
        candidates = dataclasses.replace(
            query, query_embedding=protected, similarity_top_k=fetch_k, mode=VectorStoreQueryMode.DEFAULT
        )
        return candidates, clean

    def _ranked(
        self, query: VectorStoreQuery, clean: np.ndarray, result: VectorStoreQueryResult
    ) -> VectorStoreQueryResult:
        """Open the candidates' sealed vectors, rank them exactly (or by MMR), open the winners only."""
        assert self._two_stage is not None
        shells = result.nodes or []
        ids: Sequence[Any] = result.ids if result.ids and len(result.ids) == len(shells) else []
        rids = [
            RecordSealer.resolve_record_id(ids[i] if ids else None, (s.metadata or {}).get(ID_FIELD, s.node_id))
            for i, s in enumerate(shells)
        ]
        if not shells:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vectors = np.stack(
            [self._two_stage.open_vector((s.metadata or {}).get(VECTOR_KEY), record_id=r) for s, r in zip(shells, rids)]
        )
        k = query.similarity_top_k
        if query.mode == VectorStoreQueryMode.MMR:
            scores, order = get_top_k_mmr_embeddings(
                clean.tolist(),
                vectors.tolist(),
                similarity_top_k=k,
                embedding_ids=list(range(len(shells))),
                mmr_threshold=query.mmr_threshold,
            )
        else:
            order, scores = rerank(clean, vectors, k)
        nodes = []
        for i in order:
            node = self.open_node(shells[i], store_id=ids[i] if ids else None)
            node.embedding = vectors[i].tolist()
            nodes.append(node)
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[float(x) for x in scores], ids=[rids[i] for i in order]
        )

    def _check(self, filters: MetadataFilters | None, store_kwargs: Mapping[str, Any] | None = None) -> None:
        # one rule for both frameworks (sealed_records): MetadataFilters, then every filter-like store keyword
        self._records.check_filter(filters)
        self._records.check_store_kwargs(store_kwargs or {})

    # -- the vector store protocol ---------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add the shells of ``nodes`` (the nodes themselves are not modified)."""
        return self._store.add(self._shells(nodes), **add_kwargs)

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Async :meth:`add`."""
        return await self._store.async_add(self._shells(nodes), **kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The wrapped store's query, its nodes opened (stores that keep no text return ids only).

        In two-stage search the store gets a protected query for ``fetch_k`` candidates; the result
        holds the best ``similarity_top_k`` by exact cosine (those are its similarities).
        """
        self._check(query.filters, kwargs)
        store_query, clean = self._store_query(query)
        result = self._store.query(store_query, **kwargs)
        return self._open_result(result) if clean is None else self._ranked(query, clean, result)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Async :meth:`query`."""
        self._check(query.filters, kwargs)
        store_query, clean = self._store_query(query)
        result = await self._store.aquery(store_query, **kwargs)
        return self._open_result(result) if clean is None else self._ranked(query, clean, result)

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The wrapped store's nodes, opened."""
        self._check(filters)
        return [self.open_node(n) for n in self._store.get_nodes(node_ids, filters)]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Async :meth:`get_nodes`."""
        self._check(filters)
        return [self.open_node(n) for n in await self._store.aget_nodes(node_ids, filters)]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the nodes of a source document (its id is stored plain)."""
        self._store.delete(ref_doc_id, **delete_kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Async :meth:`delete`."""
        await self._store.adelete(ref_doc_id, **delete_kwargs)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Delete nodes by id (or by a filter on plain fields)."""
        self._check(filters)
        self._store.delete_nodes(node_ids, filters, **delete_kwargs)

    async def adelete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Async :meth:`delete_nodes`."""
        self._check(filters)
        await self._store.adelete_nodes(node_ids, filters, **delete_kwargs)

    def clear(self) -> None:
        """Clear the wrapped store."""
        self._store.clear()

    async def aclear(self) -> None:
        """Async :meth:`clear`."""
        await self._store.aclear()

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Persist the wrapped store (it only ever held shells)."""
        self._store.persist(persist_path, fs=fs)

    def __repr__(self) -> str:
        two_stage = f", two_stage={self.two_stage!r}" if self._two_stage is not None else ""
        return (
            f"SealedVectorStore(store={type(self._store).__name__}, sealed_metadata={self.sealed_metadata!r}"
            f"{two_stage}, key=<redacted>)"
        )
