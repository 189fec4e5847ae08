"""The store-held index's port (:class:`textcrafter_rag.sealed.port.RecordPort`) over a LangChain store.

It writes the log's records as Documents under the vectors the core chose (through the sealed store's
embeddings shim), reads them back by id, and searches by vector. Listing every record, which LangChain's
interface does not offer, is done per engine where the engine can: ``InMemoryVectorStore``, Chroma, FAISS
(its docstore ids), Qdrant (scroll) and Milvus (a query iterator, :mod:`._milvus`); elsewhere
:meth:`LangChainPort.enumerate` says it cannot.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.errors import NotSupportedError
from textcrafter_rag.sealed.port import PortRecord, is_one_of, serves_concurrent_calls
from textcrafter_rag.sealed.records import ID_FIELD, canonical_record_id

from ._milvus import is_milvus, milvus_records
from .sealed_embeddings import SealedTextEmbeddings

__all__ = ["LangChainPort", "doc_record", "doc_records"]


def doc_record(doc: Document, *, id_field: str) -> PortRecord:
    """A Document the store returned as the core reads it: its id, sealed text and string fields."""
    meta = doc.metadata or {}
    sid = doc.id if doc.id is not None else meta.get(id_field, meta.get(ID_FIELD))
    fields = {k: v for k, v in meta.items() if isinstance(v, str)}
    return PortRecord(canonical_record_id(sid), doc.page_content, fields)


def doc_records(docs: Sequence[Document], *, id_field: str) -> list[PortRecord | None]:
    """:func:`doc_record` of each Document, ``None`` for one without an id (never a log record: each has one).

    A search reads the index log's last records with the records it ranks (:class:`~textcrafter_rag.sealed.
    engine.Picked`): this tells the log's apart."""
    return [doc_record(d, id_field=id_field) if _has_id(d, id_field) else None for d in docs]


def _has_id(doc: Document, id_field: str) -> bool:
    meta = doc.metadata or {}
    return doc.id is not None or meta.get(id_field, meta.get(ID_FIELD)) is not None


#: Stores whose ``add_documents`` upserts by id (Chroma's ``collection.upsert``, Qdrant's ``upsert``, the in-memory
#: store's dict). FAISS refuses a held id and Milvus keeps both records: no beacon there.
_UPSERTING = (
    ("langchain_chroma.", "Chroma"),
    ("langchain_qdrant.", "QdrantVectorStore"),
    ("langchain_core.vectorstores.in_memory", "InMemoryVectorStore"),
)


class LangChainPort:
    """:class:`~textcrafter_rag.sealed.port.RecordPort` over ``store`` (built with ``shim``)."""

    def __init__(self, store: VectorStore, shim: SealedTextEmbeddings, *, id_field: str) -> None:
        self.store, self.shim, self.id_field = store, shim, id_field
        #: Whether the store takes calls from two threads at once (a server's client): the core may then compact
        #: the index in a thread of its own (:mod:`textcrafter_rag.sealed.port`).
        self.concurrent_calls = serves_concurrent_calls(store)
        #: Whether ``add_documents`` replaces a record the store holds (an upsert): the index log then keeps a
        #: beacon that spares a search the search of its heads (:mod:`textcrafter_rag.sealed.port`).
        self.replaces_records = is_one_of(store, _UPSERTING)

    def _record(self, doc: Document) -> PortRecord:
        return doc_record(doc, id_field=self.id_field)

    def put(self, records: Sequence[PortRecord]) -> None:
        docs = [Document(id=r.id, page_content=r.text, metadata={**r.fields, ID_FIELD: r.id}) for r in records]
        vectors = {r.text: list(r.vector or ()) for r in records}
        with self.shim.registered(vectors):
            self.store.add_documents(docs, ids=[r.id for r in records])

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        return [self._record(d) for d in self.store.get_by_ids(list(ids))] if ids else []

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self.store.delete(list(ids))

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        return [self._record(d) for d in self.store.similarity_search_by_vector(list(vector), k=k)]

    def enumerate(self, batch_size: int) -> Iterator[list[PortRecord]]:
        """Every record, in batches, where the engine can list them."""
        store = self.store
        if hasattr(store, "store") and isinstance(store.store, dict):  # InMemoryVectorStore
            ids = list(store.store)
        elif hasattr(store, "index_to_docstore_id"):  # FAISS
            ids = list(store.index_to_docstore_id.values())
        elif hasattr(store, "_collection") and hasattr(store._collection, "get"):  # Chroma
            yield from self._chroma(batch_size)
            return
        elif hasattr(store, "client") and hasattr(store.client, "scroll"):  # Qdrant
            yield from self._qdrant(batch_size)
            return
        elif is_milvus(store):  # a Milvus query iterator
            yield from milvus_records(store, batch_size)
            return
        else:
            raise NotSupportedError(f"{type(store).__name__} cannot list its records: rebuild_index() needs a listing")
        for start in range(0, len(ids), batch_size):
            yield self.get(ids[start : start + batch_size])

    def _chroma(self, batch_size: int) -> Iterator[list[PortRecord]]:
        offset = 0
        while True:
            got: dict[str, Any] = self.store._collection.get(
                limit=batch_size, offset=offset, include=["documents", "metadatas"]
            )
            if not got["ids"]:
                return
            yield [
                PortRecord(canonical_record_id(i), t or "", {k: v for k, v in (m or {}).items() if isinstance(v, str)})
                for i, t, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
            ]
            offset += len(got["ids"])

    def _qdrant(self, batch_size: int) -> Iterator[list[PortRecord]]:
        store, offset = self.store, None
        while True:
            points, offset = store.client.scroll(
                store.collection_name, limit=batch_size, offset=offset, with_payload=True, with_vectors=False
            )
            yield [
                PortRecord(
                    canonical_record_id(p.id),
                    (p.payload or {}).get(store.content_payload_key, ""),
                    {
                        k: v
                        for k, v in ((p.payload or {}).get(store.metadata_payload_key) or {}).items()
                        if isinstance(v, str)
                    },
                )
                for p in points
            ]
            if offset is None:
                return
