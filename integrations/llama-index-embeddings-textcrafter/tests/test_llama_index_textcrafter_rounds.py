"""The LlamaIndex sealed store searching candidates in rounds to a recall target (``TwoStageSearch(recall=...)``)."""

from __future__ import annotations

import asyncio
import itertools
from unittest import mock

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import SealedVectorStore
from textcrafter_rag.sealed.candidates import TwoStageSearch, pack_vector, unpack_vector
from textcrafter_rag.sealed.rounds import RecallCapWarning
from textcrafter_rag.sealing import generate_key

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

RNG = np.random.default_rng(5)
VECTORS = RNG.standard_normal((300, 24))
QUERY = VECTORS[7] + 0.3 * RNG.standard_normal(24)


def _sealed(**search) -> SealedVectorStore:  # type: ignore[no-untyped-def]
    inner = QdrantVectorStore(client=QdrantClient(location=":memory:"), collection_name="notes")
    store = SealedVectorStore(inner, key=generate_key(), search=TwoStageSearch(**search))
    store.add([TextNode(id_=f"n{i}", text=f"note {i}", embedding=v.tolist()) for i, v in enumerate(VECTORS)])
    return store


def _exact(k: int) -> list[str]:
    sealed = np.stack([unpack_vector(pack_vector(v / np.linalg.norm(v))) for v in VECTORS])
    scores = sealed @ QUERY / np.linalg.norm(sealed, axis=1)
    return [f"note {i}" for i in np.argsort(-scores)[:k]]


def _asked(store: SealedVectorStore, run) -> tuple[list[int], object]:  # type: ignore[no-untyped-def]
    """The ``similarity_top_k`` of every query the wrapped store got, and what ``run()`` returned."""
    inner = type(store.store)

    async def aquery(self, q, **kwargs):  # type: ignore[no-untyped-def]  # the sync client holds the points
        return self.query(q, **kwargs)

    with (
        mock.patch.object(inner, "query", autospec=True, side_effect=inner.query) as query,
        mock.patch.object(inner, "aquery", aquery),
    ):
        out = run()
    return [call.args[1].similarity_top_k for call in query.call_args_list], out


pytestmark = pytest.mark.filterwarnings("ignore::llama_index.embeddings.textcrafter.ReportedVectorsWarning")


def test_rounds_double_until_the_rule_and_the_answer_is_the_exact_top() -> None:
    store = _sealed(fetch_k=1000, recall=0.99)
    question = VectorStoreQuery(query_embedding=QUERY.tolist(), similarity_top_k=5)
    asked, result = _asked(store, lambda: store.query(question))
    assert [n.get_content() for n in result.nodes] == _exact(5)
    assert asked[0] == 100 and all(b == 2 * a for a, b in itertools.pairwise(asked))
    again, aresult = _asked(store, lambda: asyncio.run(store.aquery(question)))
    assert again == asked and [n.get_content() for n in aresult.nodes] == _exact(5)
    assert store.capped == 0


def test_reaching_fetch_k_first_is_warned_and_counted() -> None:
    store = _sealed(fetch_k=150, recall=0.999)
    question = VectorStoreQuery(query_embedding=QUERY.tolist(), similarity_top_k=5)
    with pytest.warns(RecallCapWarning):
        asked, _ = _asked(store, lambda: store.query(question))
    assert asked == [100, 150] and store.capped == 1


def test_no_round_sends_the_store_the_query_text() -> None:
    """The store gets the protected vector only: the clean question (``query_str``) stays in this process."""
    store = _sealed(fetch_k=1000, recall=0.99)
    secret = "which patient was treated at ward 3 for condition 5?"
    question = VectorStoreQuery(query_embedding=QUERY.tolist(), query_str=secret, similarity_top_k=5)
    inner = type(store.store)
    original = inner.query
    sent: list[VectorStoreQuery] = []

    def query(self, q, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(q)
        return original(self, q, **kwargs)

    async def aquery(self, q, **kwargs):  # type: ignore[no-untyped-def]
        return query(self, q, **kwargs)

    with mock.patch.object(inner, "query", query), mock.patch.object(inner, "aquery", aquery):
        result = store.query(question)
        aresult = asyncio.run(store.aquery(question))
    assert [n.get_content() for n in result.nodes] == [n.get_content() for n in aresult.nodes] == _exact(5)
    assert len(sent) > 2  # several rounds, sync and async
    assert all(q.query_str is None for q in sent)
    assert all(secret not in repr(q) for q in sent)
