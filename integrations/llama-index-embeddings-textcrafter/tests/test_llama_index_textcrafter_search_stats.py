"""``store.stats`` and the ``textcrafter_rag`` logger on the LlamaIndex sealed store; the library's own records
(the marker, the index log) are never a result.

LlamaIndex hands no callable to a store (its filters are ``MetadataFilters``), so what a user's filter could be
handed is a LangChain matter; here the library's records must only never come back as nodes.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import SealedVectorStore
from textcrafter_rag.logs import SearchStats
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.layout import MARKER_KEY, is_library_record
from textcrafter_rag.sealed.rounds import RecallCapWarning
from textcrafter_rag.sealing import generate_key

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

pytestmark = pytest.mark.filterwarnings("ignore::llama_index.embeddings.textcrafter.ReportedVectorsWarning")

RNG = np.random.default_rng(5)
VECTORS = RNG.standard_normal((300, 24))
QUERY = VECTORS[7] + 0.3 * RNG.standard_normal(24)


def _sealed(search: TwoStageSearch | StoreIndexSearch) -> SealedVectorStore:
    inner = QdrantVectorStore(client=QdrantClient(location=":memory:"), collection_name="notes")
    store = SealedVectorStore(inner, key=generate_key(), search=search)
    store.add([TextNode(id_=f"n{i}", text=f"note {i}", embedding=v.tolist()) for i, v in enumerate(VECTORS)])
    return store


def test_every_capped_search_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """The setting of the rounds tests that caps every search: 300 records, fetch_k=150, recall 0.999."""
    store = _sealed(TwoStageSearch(fetch_k=150, recall=0.999))
    assert store.stats == SearchStats()
    question = VectorStoreQuery(query_embedding=QUERY.tolist(), similarity_top_k=5)
    caplog.set_level(logging.INFO, logger="textcrafter_rag")
    with pytest.warns(RecallCapWarning):
        store.query(question)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecallCapWarning)  # warned once per store object ...
        store.query(question)
    capped = [r for r in caplog.records if r.name == "textcrafter_rag" and "recall target" in r.getMessage()]
    assert len(capped) == store.capped == 2 and all(r.levelno == logging.INFO for r in capped)  # ... logged each time
    assert store.stats == SearchStats(searches=2, capped_searches=2, dead_entries_skipped=0, records_skipped=0)


def test_the_store_held_index_counts_its_searches() -> None:
    store = _sealed(StoreIndexSearch())
    for _ in range(3):
        assert len(store.query(VectorStoreQuery(query_embedding=QUERY.tolist(), similarity_top_k=2)).nodes) == 2
    assert store.stats.searches == 3 and store.stats.records_skipped == 0


def test_the_library_s_records_are_never_a_result() -> None:
    """Single-stage results and listings pass over a record of the library's own (another tenant's marker)."""
    inner = QdrantVectorStore(client=QdrantClient(location=":memory:"), collection_name="notes")
    store = SealedVectorStore(inner, key=generate_key(), search=None)
    nodes = [TextNode(text="Jane moved.", embedding=[1.0, 0.0]), TextNode(text="Bob paid.", embedding=[0.0, 1.0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unprotected single-stage vectors
        store.add(nodes)
    marker = TextNode(text="sealed", metadata={MARKER_KEY: "candidates"}, embedding=[1.0, 0.1])
    inner.add([marker])  # as another tenant's marker sits in a shared collection
    result = store.query(VectorStoreQuery(query_embedding=[1.0, 0.05], similarity_top_k=3))
    assert sorted(n.get_content() for n in result.nodes or []) == ["Bob paid.", "Jane moved."]
    assert len(result.similarities or []) == len(result.nodes or []) == len(result.ids or [])
    assert not any(is_library_record(n.metadata) for n in store.get_nodes())
