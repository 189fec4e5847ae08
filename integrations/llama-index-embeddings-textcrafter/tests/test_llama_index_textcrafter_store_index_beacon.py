"""The store-held index's log beacon in LlamaIndex: Qdrant's points are upserted, so every write overwrites it, and
a worker's query reads it by id with its shells instead of searching the log's heads. Qdrant in memory."""

from __future__ import annotations

from unittest import mock

import pytest

from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import NOTES, FakeBase, exact_top
from .test_llama_index_textcrafter_store_index import _nodes, _texts, _worker

pytest.importorskip("llama_index.vector_stores.qdrant")
from qdrant_client import QdrantClient

pytestmark = pytest.mark.filterwarnings("ignore::llama_index.embeddings.textcrafter.ReportedVectorsWarning")

TEXTS = NOTES


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def test_on_qdrant_a_quiet_query_searches_no_heads_and_a_later_write_is_found_by_the_next(base) -> None:
    """Qdrant's points are upserted, so every write overwrites the log's beacon: a worker's query reads it by id
    with its shells and searches the log's heads only when a write was made since; Chroma's ``add`` keeps a held
    id's record (no beacon), as the in-memory ``SimpleVectorStore`` keeps no payload (no store-held index)."""
    client, key = QdrantClient(":memory:"), generate_key()
    first = _worker(client, key)
    first.add(_nodes(base, range(12)))
    second = _worker(client, key)
    q = "who was treated at ward 3?"
    for _ in range(2):  # the whole log, then the beacon read before a search of the heads: its value is seen
        _texts(second, base, q, 3)
    assert second._search.store_index().log.beacon is not None
    with mock.patch.object(QdrantClient, "query_points", side_effect=AssertionError("searched")):
        assert _texts(second, base, q, 5) == [t for t in exact_top(base, q, 24) if t in TEXTS[:12]][:5]
    first.add(_nodes(base, range(12, 24)))
    assert _texts(second, base, q, 5) == exact_top(base, q, 5)  # the beacon moved: the heads were searched
