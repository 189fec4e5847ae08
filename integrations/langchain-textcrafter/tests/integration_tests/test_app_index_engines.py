"""The app-side index on in-process engines: Qdrant local (on disk) and FAISS, with the bundled MiniLM.

The engine holds sealed records and keyed random vectors; the application ranks with its own index and
reads records by id. A second process (a new store object over the same collection and index file)
searches at once without embedding anything again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

from ._two_stage_engine_checks import (
    FETCH_K,
    StoredRow,
    add_two_stage_records,
    app_index_store,
    check_two_stage_hits,
    check_two_stage_rows,
)

qdrant_client = pytest.importorskip("qdrant_client", reason="the Qdrant tests need qdrant-client (the test extra)")
langchain_qdrant = pytest.importorskip("langchain_qdrant")


def _qdrant(client: Any) -> Any:
    from qdrant_client import models

    def build(e: Embeddings) -> Any:
        if not client.collection_exists("docs"):
            client.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.DOT))
        return langchain_qdrant.QdrantVectorStore(
            client=client, collection_name="docs", embedding=e, distance=models.Distance.DOT
        )

    return build


def test_qdrant_local_holds_no_rankable_vector_and_a_new_process_searches_at_once(tmp_path: Path, minilm: Any) -> None:
    key, index = generate_key(), tmp_path / "docs.tcidx"
    client = qdrant_client.QdrantClient(path=str(tmp_path / "qdrant"))
    try:
        store = app_index_store(_qdrant(client), minilm_embeddings(minilm), key, index_path=index)
        ids = add_two_stage_records(store)
        check_two_stage_hits(store, ids, minilm)
        points, _ = client.scroll("docs", limit=100, with_payload=True, with_vectors=True)
        rows = [StoredRow(p.payload["page_content"], p.payload["metadata"], p.vector) for p in points]
        check_two_stage_rows(rows, minilm, tmp_path, mode="index")
    finally:
        client.close()
    client = qdrant_client.QdrantClient(path=str(tmp_path / "qdrant"))  # another process, the same files
    try:
        reopened = SealedVectorStore(
            _qdrant(client), embedding=minilm_embeddings(minilm), key=key, sealed_metadata=SEALED_FIELDS,
            search=AppIndexSearch(open_k=FETCH_K, index_path=index),
        )  # fmt: skip
        check_two_stage_hits(reopened, ids, minilm)
    finally:
        client.close()


def test_faiss_serves_the_app_side_index(minilm: Any) -> None:
    faiss_store = pytest.importorskip("langchain_community.vectorstores.faiss")
    from langchain_community.docstore.in_memory import InMemoryDocstore

    def build(e: Embeddings) -> Any:
        import faiss

        return faiss_store.FAISS(e, faiss.IndexFlatIP(384), InMemoryDocstore(), {})

    store = app_index_store(build, minilm_embeddings(minilm), generate_key())
    ids = add_two_stage_records(store)
    check_two_stage_hits(store, ids, minilm)


def minilm_embeddings(minilm: Any) -> Any:
    from langchain_textcrafter import ProtectedEmbeddings

    return ProtectedEmbeddings(base=minilm)  # read through its base encoder: the clean vectors are sealed
