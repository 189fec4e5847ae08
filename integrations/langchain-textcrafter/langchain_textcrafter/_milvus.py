"""Reads by id and a listing for ``langchain_milvus.Milvus``, which the store-held index (the default) needs.

``langchain-milvus`` (0.4.0) defines no ``get_by_ids``, so a sealed store over Milvus fell back to candidates,
where the store ranks noised vectors that an inserter can compare its own with. The Milvus server itself reads
rows by primary key (``MilvusClient.query(ids=...)``) and lists them (``query_iterator``), so the sealed store
reads the Milvus store it wraps through :class:`MilvusReads`, a view that adds ``get_by_ids`` and hands every
other attribute to the store itself (the user's store object is never changed), and :func:`milvus_records`
lists the collection for ``rebuild_index()``. A Milvus store is recognised by its class's module, so nothing
here imports ``langchain_milvus``, which stays an optional dependency.

Sealed modes also need ``enable_dynamic_field=True``: the sealed store's own records (the marker, the index
log's heads and segments) and its data records carry different metadata fields, and a collection without
dynamic fields takes the first insert's fields as its schema and refuses every record that lacks one of them
(pymilvus' ``DataNotMatchException``, after the records before were stored). Refused at construction instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.sealed.records import canonical_record_id

__all__ = ["MilvusReads", "is_milvus", "milvus_reads_by_id", "milvus_records"]


def is_milvus(store: Any) -> bool:
    """Whether ``store`` is a ``langchain_milvus`` store (``Milvus``, ``Zilliz`` or a subclass), or a view of one."""
    if isinstance(store, MilvusReads):
        return True
    return any(c.__module__.split(".")[0] == "langchain_milvus" for c in type(store).__mro__)


class MilvusReads:
    """A Milvus store read by id: ``get_by_ids`` is a Milvus query by primary key; all else is the store's own."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        if name == "store":  # not set yet (a copy being built): never recurse
            raise AttributeError(name)
        return getattr(self.store, name)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The rows of ``ids`` (primary keys), as ``similarity_search`` returns rows, ``Document.id`` set."""
        store: Any = self.store
        if not ids or store.col is None:  # no collection yet: nothing was ever written
            return []
        rows = store.client.query(store.collection_name, ids=list(ids), output_fields=store._get_output_fields())
        out = []
        for row in rows:
            doc = store._parse_document(dict(row))
            doc.id = str(row[store._primary_field])
            out.append(doc)
        return out

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Async :meth:`get_by_ids` (pymilvus' client is synchronous: run in a worker thread)."""
        return await asyncio.to_thread(self.get_by_ids, ids)


def milvus_reads_by_id(store: VectorStore, *, sealed: bool) -> Any:
    """``store`` itself, or a :class:`MilvusReads` view of it if it is a Milvus store without ``get_by_ids``.

    Args:
        store: The wrapped store.
        sealed: Whether the sealed store searches in a sealed mode (these write records of several layouts).

    Raises:
        InvalidInputError: A sealed mode on a Milvus store built without ``enable_dynamic_field=True``.
    """
    if not is_milvus(store):
        return store
    if sealed and not getattr(store, "enable_dynamic_field", False):
        raise InvalidInputError(
            f"build {type(store).__name__} with enable_dynamic_field=True for sealed search: the sealed store's "
            "own records (its marker, the index log) and its data records carry different metadata fields, and a "
            "collection without dynamic fields refuses every record that lacks a field of the first one stored"
        )
    if type(store).get_by_ids is VectorStore.get_by_ids:
        return MilvusReads(store)
    return store


def milvus_records(store: Any, batch_size: int) -> Iterator[list[PortRecord]]:
    """Every row of a Milvus store's collection as port records, ``batch_size`` at a time (``query_iterator``)."""
    if store.col is None:
        return
    fields = store._get_output_fields()
    rows = store.client.query_iterator(store.collection_name, batch_size=batch_size, output_fields=fields)
    try:
        while batch := rows.next():
            docs = [(row[store._primary_field], store._parse_document(dict(row))) for row in batch]
            yield [
                PortRecord(
                    canonical_record_id(pk),
                    d.page_content,
                    {k: v for k, v in d.metadata.items() if isinstance(v, str)},
                )
                for pk, d in docs
            ]
    finally:
        rows.close()
