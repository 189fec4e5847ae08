"""Reads by id and a listing for ``langchain_milvus.Milvus``, which the store-held index (the default) needs.

``langchain-milvus`` (0.4.0) defines no ``get_by_ids``, so a sealed store over Milvus fell back to candidates,
where the store ranks noised vectors that an inserter can compare its own with. The Milvus server itself reads
rows by primary key (``MilvusClient.query(ids=...)``) and lists them (``query_iterator``), so the sealed store
gives the Milvus store it wraps that read: :func:`milvus_reads_by_id` turns its class into a subclass that adds
``get_by_ids`` and nothing else (made once per class), and :func:`milvus_records` lists the collection for
``rebuild_index()``. A Milvus store is recognised by its class's module, so nothing here imports
``langchain_milvus``, which stays an optional dependency.

Sealed modes also need ``enable_dynamic_field=True``: the sealed store's own records (the marker, the index
log's heads and segments) and its data records carry different metadata fields, and a collection without
dynamic fields takes the first insert's fields as its schema and refuses every record that lacks one of them
(pymilvus' ``DataNotMatchException``, after the records before were stored). Refused at construction instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.sealed_records import canonical_record_id

__all__ = ["is_milvus", "milvus_reads_by_id", "milvus_records"]

#: The subclass with ``get_by_ids`` made for each Milvus class (one per class, shared by every store of it).
_READING: dict[type, type] = {}
_LOCK = threading.Lock()


def is_milvus(store: Any) -> bool:
    """Whether ``store`` is a ``langchain_milvus`` store (``Milvus``, ``Zilliz`` or a subclass of one)."""
    return any(c.__module__.split(".")[0] == "langchain_milvus" for c in type(store).__mro__)


def _get_by_ids(self: Any, ids: Sequence[str], /) -> list[Document]:
    """The rows of ``ids`` (primary keys), as ``similarity_search`` returns rows, ``Document.id`` set."""
    if not ids or self.col is None:  # no collection yet: nothing was ever written
        return []
    rows = self.client.query(self.collection_name, ids=list(ids), output_fields=self._get_output_fields())
    out = []
    for row in rows:
        doc = self._parse_document(dict(row))
        doc.id = str(row[self._primary_field])
        out.append(doc)
    return out


def _reading_class(cls: type) -> type:
    with _LOCK:
        if cls not in _READING:
            doc = f"{cls.__name__} with get_by_ids (a Milvus query by primary key), added by langchain-textcrafter."
            _READING[cls] = type(cls.__name__, (cls,), {"get_by_ids": _get_by_ids, "__doc__": doc})
        return _READING[cls]


def milvus_reads_by_id(store: VectorStore, *, sealed: bool) -> VectorStore:
    """``store`` itself, given ``get_by_ids`` if it is a Milvus store without one.

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
        store.__class__ = _reading_class(type(store))
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
