"""SealedVectorStore searching candidates in rounds to a recall target (``TwoStageSearch(recall=...)``)."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore, exact_top

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.rounds import RecallCapWarning
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Note {i}: patient treated for condition {i % 11} in ward {i % 13}." for i in range(260)]


class AskedStore(RecordingStore):
    """Records how many records each search asked for."""

    def __init__(self, embedding) -> None:  # type: ignore[no-untyped-def]
        super().__init__(embedding)
        self.asked: list[int] = []

    def similarity_search_by_vector(self, embedding, k=4, **kwargs):  # type: ignore[no-untyped-def]
        self.asked.append(k)
        return super().similarity_search_by_vector(embedding, k=k, **kwargs)

    async def asimilarity_search_by_vector(self, embedding, k=4, **kwargs):  # type: ignore[no-untyped-def]
        self.asked.append(k)
        return await super().asimilarity_search_by_vector(embedding, k=k, **kwargs)


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _store(base, **search) -> SealedVectorStore:  # type: ignore[no-untyped-def]
    store = SealedVectorStore(AskedStore, embedding=base, key=generate_key(), search=TwoStageSearch(**search))
    store.add_texts(TEXTS)
    return store


def test_the_store_is_asked_in_doubling_rounds_and_the_answer_is_the_exact_top(base) -> None:
    store = _store(base, fetch_k=1000, recall=0.99)
    query = "condition 4 in ward 7"
    hits = store.similarity_search(query, k=5)
    assert [d.page_content for d in hits] == exact_top(base, TEXTS, query, 5)
    asked = store.store.asked
    assert asked[0] == 100 and all(b == 2 * a for a, b in itertools.pairwise(asked))
    assert store.capped == 0
    # every round sends the store the very same protected query: rounds add no draws it could average
    assert len(store.store.searched) == len(asked) > 1
    assert all(v == store.store.searched[0] for v in store.store.searched)
    store.store.asked.clear()
    got = asyncio.run(store.asimilarity_search(query, k=5))
    assert [d.page_content for d in got] == exact_top(base, TEXTS, query, 5)
    assert store.store.asked == asked  # the async path asks the same rounds


def test_without_a_target_the_store_is_asked_once_for_fetch_k(base) -> None:
    store = _store(base, fetch_k=150)
    store.similarity_search("condition 4", k=5)
    assert store.store.asked == [150]


def test_reaching_fetch_k_before_the_target_is_warned_once_and_counted(base) -> None:
    store = _store(base, fetch_k=120, recall=0.999)
    with pytest.warns(RecallCapWarning):
        store.similarity_search("condition 1", k=5)
    store.similarity_search("ward 2", k=5)
    assert store.store.asked == [100, 120, 100, 120]
    assert store.capped == 2
