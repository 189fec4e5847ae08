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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from textcrafter_rag.sealed_records import ID_FIELD, RecordSealer, canonical_record_id, filter_field_names
from textcrafter_rag.sealing import SealError, SecretKey

__all__ = ["NODE_FIELD", "SealedVectorStore"]

#: Field name the whole node is sealed under.
NODE_FIELD = "node"


#: Store-specific keyword arguments that hold a filter without "filter" in their name (Chroma, Milvus).
_FILTER_KWARGS = ("where", "where_document", "expr")


def _filter_keys(filters: Any, store_kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """Field names in ``MetadataFilters`` and in store-specific filter arguments (``qdrant_filters=``, ``where=``).

    One definition for both frameworks: :func:`textcrafter_rag.sealed_records.filter_field_names`
    reads any filter form (Qdrant ``models.Filter``, dicts, expressions) without importing its package.
    """
    extra = [v for k, v in (store_kwargs or {}).items() if "filter" in k or k in _FILTER_KWARGS]
    return sorted(filter_field_names([filters, *extra]) if extra else filter_field_names(filters))


class SealedVectorStore(BasePydanticVectorStore):
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

    Raises:
        TypeError: ``sealed_metadata`` is a string.
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

    def __init__(
        self,
        store: BasePydanticVectorStore,
        *,
        key: bytes | str | SecretKey,
        sealed_metadata: Sequence[str] = (),
        context: str = "",
    ) -> None:
        if not isinstance(store, BasePydanticVectorStore):
            raise TypeError(f"store must be a LlamaIndex BasePydanticVectorStore, got {type(store).__name__}")
        super().__init__(stores_text=store.stores_text, is_embedding_query=store.is_embedding_query)
        self._store = store
        self._records = RecordSealer(key, sealed_metadata=sealed_metadata, context=context)

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

    # -- sealing and opening ---------------------------------------------------------------------

    def seal_node(self, node: BaseNode) -> TextNode:
        """The shell the wrapped store gets for ``node``: id, embedding, source id, plain metadata, sealed node."""
        rid = canonical_record_id(node.node_id)
        token = self._records.seal_value(
            doc_to_json(node.model_copy(update={"embedding": None})), record_id=rid, field=NODE_FIELD
        )
        relationships = {}
        if node.ref_doc_id is not None:
            relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=node.ref_doc_id)
        metadata = {**self._records.plain_metadata(node.metadata), ID_FIELD: rid}
        return TextNode(
            id_=node.node_id, text=token, metadata=metadata, relationships=relationships, embedding=node.embedding
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

    def _shells(self, nodes: Iterable[BaseNode]) -> list[BaseNode]:
        return [self.seal_node(n) for n in nodes]

    def _check(self, filters: MetadataFilters | None, store_kwargs: Mapping[str, Any] | None = None) -> None:
        self._records.check_filter_keys(_filter_keys(filters, store_kwargs))

    # -- the vector store protocol ---------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add the shells of ``nodes`` (the nodes themselves are not modified)."""
        return self._store.add(self._shells(nodes), **add_kwargs)

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Async :meth:`add`."""
        return await self._store.async_add(self._shells(nodes), **kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The wrapped store's query, its nodes opened (stores that keep no text return ids only)."""
        self._check(query.filters, kwargs)
        return self._open_result(self._store.query(query, **kwargs))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Async :meth:`query`."""
        self._check(query.filters, kwargs)
        return self._open_result(await self._store.aquery(query, **kwargs))

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
        return (
            f"SealedVectorStore(store={type(self._store).__name__}, sealed_metadata={self.sealed_metadata!r}, "
            "key=<redacted>)"
        )
