"""The store-held index (the default) on Milvus Lite: the index log's segments fit Milvus' VARCHAR field.

Milvus keeps a record's text in a VARCHAR field of at most 65,535 characters, so the index log cuts each sealed
segment into chunks of at most ``segment_chars`` (60,000). Here one add of 150 records of 12,000-character texts
and 4,000-character sealed metadata writes a segment of several maximum-size chunks into a real Milvus Lite
database (``langchain_milvus.Milvus`` wrapped in the LangChain ``SealedVectorStore``, no mode named), and a new
``SealedVectorStore`` over the same file, after the first store's client and the Milvus Lite server were closed
(the data read back from disk), finds every record by its own text, with its metadata. ``langchain-milvus``
has no ``get_by_ids``; the sealed store gives the Milvus store it wraps one (``langchain_textcrafter._milvus``),
and lists Milvus collections for ``rebuild_index()``. Vectors come from a hash of the text: no model, offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import warnings
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag import SingleStageSearch
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.core import UnprotectedVectorsWarning
from textcrafter_rag.sealed.layout import CHUNKS_FIELD, LOG_FIELD
from textcrafter_rag.sealing import generate_key

from ._sealed_engine_servers import release_milvus

pytest.importorskip("milvus_lite", reason="the Milvus tests need milvus-lite (the test extra)")
Milvus = pytest.importorskip("langchain_milvus", reason="the Milvus tests need langchain-milvus").Milvus

VARCHAR_MAX = 65_535
SEGMENT_CHARS = StoreIndexSearch().segment_chars
COLLECTION = "sealed_index"
DIM = 384
N = 150


class HashEmbeddings(Embeddings):
    """A unit vector per text from its SHA-256 (the same text, the same vector, in every process)."""

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIM)
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def _milvus(uri: str, embeddings: Any, *, dynamic: bool = True) -> Any:
    """Exact search, reads see all writes, the sealed store's ids as primary keys, any metadata field."""
    return Milvus(
        embedding_function=embeddings,
        collection_name=COLLECTION,
        connection_args={"uri": uri},
        index_params={"index_type": "FLAT", "metric_type": "L2"},
        consistency_level="Strong",
        auto_id=False,
        enable_dynamic_field=dynamic,
    )


def _sealed(uri: str, key: str) -> SealedVectorStore:
    return SealedVectorStore(
        lambda e: _milvus(uri, e), embedding=HashEmbeddings(), key=key, sealed_metadata=("note",)
    )  # no mode named: the default


def _close(store: SealedVectorStore, uri: str) -> None:
    """Close the Milvus client, then stop the Milvus Lite server for ``uri`` (its data flushed to disk)."""
    inner = store.store
    inner.client.close()
    if inner._async_milvus_client is not None:  # made in __init__, bound to no running loop here
        with contextlib.suppress(RuntimeError):
            asyncio.run(inner._async_milvus_client.close())
    release_milvus(uri)


def _rows(store: SealedVectorStore) -> list[dict[str, Any]]:
    """Every row the Milvus collection holds, every field but the vector, read with Milvus' own iterator."""
    inner = store.store
    it = inner.client.query_iterator(COLLECTION, batch_size=200, output_fields=["*"])
    rows: list[dict[str, Any]] = []
    while batch := it.next():
        rows += [{k: v for k, v in r.items() if k != "vector"} for r in batch]
    it.close()
    return rows


def _records(n: int) -> tuple[list[str], list[dict[str, str]], list[str]]:
    texts = [f"record {i}: " + hashlib.sha256(str(i).encode()).hexdigest() * 187 for i in range(n)]  # ~12,000 chars
    notes = [{"note": f"note {i} " + "abcdefghij" * 400, "n": str(i)} for i in range(n)]  # 4,000 sealed chars
    return texts, notes, [f"doc-{i}" for i in range(n)]


def test_a_segment_of_several_full_chunks_fits_milvus_and_a_new_store_finds_every_record(tmp_path) -> None:
    uri, key = str(tmp_path / "milvus.db"), generate_key()
    texts, notes, ids = _records(N)
    first = _sealed(uri, key)
    assert isinstance(first.search_options, StoreIndexSearch)  # the default: Milvus now reads by id
    assert type(first.store) is Milvus and "get_by_ids" not in vars(Milvus)  # the user's store is left as it is
    assert first.add_texts(texts, notes, ids=ids) == ids  # one add: one segment
    rows = _rows(first)
    chunks = [r for r in rows if r.get(LOG_FIELD) == "seg"]
    assert sum(1 for r in chunks if CHUNKS_FIELD in r) == 1  # one segment ...
    assert len(chunks) >= 3 and sum(len(r["text"]) == SEGMENT_CHARS for r in chunks) >= 2  # ... of full chunks
    assert len(rows) == N + len(chunks) + 2  # the data records, the chunks, one head, the marker
    strings = [v for r in rows for v in r.values() if isinstance(v, str)]
    assert max(len(v) for v in strings) <= VARCHAR_MAX and max(len(r["text"]) for r in rows) <= SEGMENT_CHARS
    _close(first, uri)

    fresh = _sealed(uri, key)  # only the key; the Milvus Lite server restarted from the file
    try:
        assert isinstance(fresh.search_options, StoreIndexSearch)
        for i in range(N):
            (hit,) = fresh.similarity_search(texts[i], k=1)
            assert (hit.id, hit.page_content, hit.metadata["note"], hit.metadata["n"]) == (
                ids[i],
                texts[i],
                notes[i]["note"],
                str(i),
            )
        got = fresh.get_by_ids(ids)
        assert sorted(d.id for d in got) == sorted(ids)
        assert fresh.stats.dead_entries_skipped == 0 and fresh.skipped == 0
    finally:
        _close(fresh, uri)


def test_rebuild_index_lists_a_milvus_collection_whose_log_was_lost(tmp_path) -> None:
    uri, key = str(tmp_path / "milvus.db"), generate_key()
    texts, notes, ids = _records(12)
    store = _sealed(uri, key)
    try:
        store.add_texts(texts, notes, ids=ids)
        inner = store.store
        log = [r[inner._primary_field] for r in _rows(store) if LOG_FIELD in r]
        assert log
        inner.client.delete(COLLECTION, ids=log)  # the index log is lost; the sealed records remain
        lost = _sealed(uri, key)  # another store object (a new client of the same server) with only the key
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the core warns that the store holds records it cannot find
            assert lost.similarity_search(texts[3], k=1) == []
        assert lost.rebuild_index(progress=False) == 12  # listed through a Milvus query iterator
        assert [d.page_content for d in _sealed(uri, key).similarity_search(texts[5], k=1)] == [texts[5]]
    finally:
        _close(store, uri)


def test_sealed_search_on_milvus_needs_dynamic_fields(tmp_path) -> None:
    """Without them the collection takes the first record's fields, and refuses every record that lacks one."""
    uri = str(tmp_path / "milvus.db")

    def static(e: Embeddings) -> Any:
        return _milvus(uri, e, dynamic=False)

    try:
        with pytest.raises(InvalidInputError, match="enable_dynamic_field=True"):
            SealedVectorStore(static, embedding=HashEmbeddings(), key=generate_key())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnprotectedVectorsWarning)  # single-stage over hash vectors
            single = SealedVectorStore(static, embedding=HashEmbeddings(), key=generate_key(), search=None)
        assert single.search_options == SingleStageSearch()  # single-stage writes records of one layout: allowed
        single.store.client.close()
    finally:
        release_milvus(uri)
