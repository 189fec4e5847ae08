"""The store-held index's port (:class:`textcrafter_rag.sealed.port.RecordPort`) over a LlamaIndex vector store.

The core keeps the sealed index's write log in the user's own store and asks it for five things; this module
spells them in LlamaIndex's vector store protocol: ``put`` adds ``TextNode``\\ s under the vectors the core chose,
``get`` is ``get_nodes(node_ids=...)``, ``delete`` is ``delete_nodes``, ``search`` is a ``VectorStoreQuery``
and ``enumerate`` (for ``rebuild_index``) lists the store where it can: Qdrant by scrolling, other stores
through ``get_nodes()`` without ids where they implement it.

The port writes and reads the store's own ids: they are already keyed UUIDs (log records, shells, the
marker), so no id mapping of the sealed store applies here. A collection that does not exist yet (Qdrant
creates it at the first ``add``) holds nothing: reads answer empty instead of the store's "not found" error,
so a first write can read the (empty) log before it creates the collection.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery

from textcrafter_rag.errors import NotSupportedError
from textcrafter_rag.sealed.port import PortRecord, is_one_of, serves_concurrent_calls
from textcrafter_rag.sealed.records import canonical_record_id

__all__ = ["LlamaIndexPort", "aread_nodes", "node_records", "read_nodes", "reads_by_id"]


def _qdrant(store: BasePydanticVectorStore) -> bool:
    """Whether ``store`` is LlamaIndex's Qdrant store (read by id through its client's ``retrieve``)."""
    return (
        type(store).__module__.startswith("llama_index.vector_stores.qdrant")
        and isinstance(getattr(store, "collection_name", None), str)
        and callable(getattr(store, "parse_to_query_result", None))
    )


def read_nodes(store: BasePydanticVectorStore, ids: Sequence[str]) -> list[BaseNode]:
    """The nodes with these store ids (a missing id is absent): ``get_nodes(node_ids=...)``, except on Qdrant.

    Qdrant's ``get_nodes`` scrolls with a has-id filter, which local Qdrant (``QdrantClient(path=...)``)
    answers by testing every point of the collection in Python: every search of the store-held index reads
    by id, so that cost grew with the store (tens of ms at 5,000 records). ``retrieve`` looks the ids up (on a
    server too), returning the same points, parsed by the store's own parser, without their vectors: what is
    read by id is opened and ranked by its sealed clean vector, and the store's vector (a keyed random one in
    the index modes) would only be copied, validated and kept (a replica's nodes: 1.5 KB each at 384-d).
    """
    ids = list(ids)
    if not ids:
        return []
    client = getattr(store, "_client", None)
    if client is None or not _qdrant(store):
        return list(store.get_nodes(node_ids=ids))
    points = client.retrieve(collection_name=store.collection_name, ids=ids, with_payload=True, with_vectors=False)
    return list(store.parse_to_query_result(points).nodes or [])


async def aread_nodes(store: BasePydanticVectorStore, ids: Sequence[str]) -> list[BaseNode]:
    """Async :func:`read_nodes` (Qdrant through its async client's ``retrieve``)."""
    ids = list(ids)
    if not ids:
        return []
    client = getattr(store, "_aclient", None)
    if client is None or not _qdrant(store):
        return list(await store.aget_nodes(node_ids=ids))
    points = await client.retrieve(
        collection_name=store.collection_name, ids=ids, with_payload=True, with_vectors=False
    )
    return list(store.parse_to_query_result(points).nodes or [])


def reads_by_id(store: BasePydanticVectorStore) -> bool:
    """Whether ``store`` can hold the store-held index: it keeps payloads and implements ``get_nodes``.

    A store that keeps no text (``stores_text=False``: FAISS, ``SimpleVectorStore``) cannot hold sealed
    records, and one that leaves ``get_nodes`` to the base class (which raises) cannot read them by id;
    ``SimpleVectorStore`` implements it only to raise.
    """
    if isinstance(store, SimpleVectorStore):
        return False
    if getattr(store, "_client", True) is None:  # an async-only client (Qdrant aclient=): the index reads in sync
        return False
    return bool(store.stores_text) and type(store).get_nodes is not BasePydanticVectorStore.get_nodes


def node_records(nodes: Sequence[BaseNode]) -> list[PortRecord | None]:
    """Nodes read by id as the store's records (a search reads the index log's last records with its records:
    :class:`~textcrafter_rag.sealed.engine.Picked`)."""
    return [LlamaIndexPort.record(n) for n in nodes]


#: Stores whose ``add`` upserts by node id. Chroma's ``add`` keeps a held id's record: no beacon there.
_UPSERTING = (("llama_index.vector_stores.qdrant.", "QdrantVectorStore"),)


class LlamaIndexPort:
    """:class:`~textcrafter_rag.sealed.port.RecordPort` over a LlamaIndex ``BasePydanticVectorStore``.

    Args:
        store: The wrapped store (it must keep payloads: ``stores_text=True``).
    """

    def __init__(self, store: BasePydanticVectorStore) -> None:
        self.store = store
        #: Whether the store takes calls from two threads at once (a server's client): the core may then compact
        #: the index in a thread of its own (:mod:`textcrafter_rag.sealed.port`).
        self.concurrent_calls = serves_concurrent_calls(store)
        #: Whether ``add`` replaces a node the store holds (Qdrant's points are upserted): the index log then keeps
        #: a beacon that spares a search the search of its heads (:mod:`textcrafter_rag.sealed.port`).
        self.replaces_records = is_one_of(store, _UPSERTING)

    def _absent(self) -> bool:
        """Whether the store's collection does not exist yet (Qdrant creates it at the first ``add``).

        A Qdrant store object made before its collection existed reads the collection's vector format only
        at construction: once another worker has created the collection, it is read here (as the store's
        own constructor would have), else its reads name a vector the collection does not have.
        """
        store = self.store
        if getattr(store, "_collection_initialized", True):
            return False
        exists = getattr(store, "_collection_exists", None)
        name = getattr(store, "collection_name", None)
        if not (callable(exists) and isinstance(name, str)):
            return False
        if not exists(name):
            return True
        detect = getattr(store, "_detect_vector_format", None)
        if callable(detect):
            detect(name)
            store._collection_initialized = True
        return False

    @staticmethod
    def record(node: BaseNode, store_id: Any = None) -> PortRecord:
        """A node the store returned as the core reads it: its id, sealed text and string fields."""
        meta = node.metadata or {}
        sid = store_id if store_id is not None else node.node_id
        fields = {k: v for k, v in meta.items() if isinstance(v, str)}
        return PortRecord(canonical_record_id(sid), node.get_content(metadata_mode=MetadataMode.NONE), fields)

    def put(self, records: Sequence[PortRecord]) -> None:
        """Add (upsert) the records as ``TextNode``\\ s under their vectors."""
        if not records:
            return
        self.store.add(
            [
                TextNode(
                    id_=r.id,
                    text=r.text,
                    metadata=dict(r.fields),  # no _tc_id: a log record is no shell (audits pass it over)
                    embedding=[float(x) for x in (r.vector or ())],
                )
                for r in records
            ]
        )

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        """The records with these ids (:func:`read_nodes`); a missing id is simply absent."""
        return [self.record(n) for n in self.get_nodes(ids)]

    def get_nodes(self, ids: Sequence[str]) -> list[BaseNode]:
        """The nodes with these ids as the store returns them (what a replica of the records keeps)."""
        if not ids or self._absent():
            return []
        return read_nodes(self.store, ids)

    def delete(self, ids: Sequence[str]) -> None:
        """Delete these records (``delete_nodes``)."""
        if ids and not self._absent():
            self.store.delete_nodes(node_ids=list(ids))

    def search_nodes(self, vector: Sequence[float], k: int) -> list[tuple[BaseNode, Any]]:
        """Up to ``k`` nodes the store ranks best for ``vector``, with the ids it returned them under (or ``None``).

        A plain ``VectorStoreQuery``: a vector the core chose, no text, no filter.
        """
        if self._absent():
            return []
        result = self.store.query(VectorStoreQuery(query_embedding=[float(x) for x in vector], similarity_top_k=k))
        nodes = list(result.nodes or [])
        ids = list(result.ids) if result.ids and len(result.ids) == len(nodes) else [None] * len(nodes)
        return list(zip(nodes, ids, strict=True))

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        """Up to ``k`` records the store ranks best for ``vector``."""
        return [self.record(n, i) for n, i in self.search_nodes(vector, k)]

    def enumerate(self, batch_size: int) -> Iterator[list[PortRecord]]:
        """Every record, in batches, where the store can list them (else ``NotSupportedError``)."""
        if self._absent():
            return
        store = self.store
        client = getattr(store, "_client", None)
        if client is not None and hasattr(client, "scroll") and hasattr(store, "parse_to_query_result"):
            yield from self._qdrant(batch_size)
            return
        if not store.stores_text or type(store).get_nodes is BasePydanticVectorStore.get_nodes:
            raise NotSupportedError(f"{type(store).__name__} cannot list its records")
        try:
            nodes = store.get_nodes()
        except NotImplementedError:
            raise NotSupportedError(f"{type(store).__name__} cannot list its records") from None
        for start in range(0, len(nodes), batch_size):
            yield [self.record(n) for n in nodes[start : start + batch_size]]

    def _qdrant(self, batch_size: int) -> Iterator[list[PortRecord]]:
        """Qdrant's records by scrolling (its ``get_nodes()`` stops at 9,999 records)."""
        store, offset = self.store, None
        while True:
            points, offset = store._client.scroll(
                collection_name=store.collection_name,
                limit=batch_size,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            nodes = store.parse_to_query_result(points).nodes or []
            yield [self.record(n, p.id) for n, p in zip(nodes, points, strict=True)]
            if offset is None:
                return
