"""Issue 28, items 4 and 6 on the LangChain sealed store: every filter keyword is checked; pickling refuses."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.errors import NotPicklableError
from textcrafter_rag.sealing import generate_key

TEXTS = ["Jane Doe moved to Leeds.", "Bob Smith paid by card 4111."]
METAS = [{"author": "Jane Doe", "topic": "moves"}, {"author": "Bob Smith", "topic": "billing"}]

SEALED_FILTERS = [
    {"expr": 'author == "Jane Doe"'},  # langchain_milvus takes its filter as expr=: it reached the server in clear
    {"expr": 'metadata["author"] == "Jane Doe"'},
    {"expr": '$meta["author"] == "Jane Doe"'},
    {"filter": 'metadata["author"] == "Jane Doe"'},
    {"where": {"author": "Jane Doe"}},
    {"where_document": {"$contains": "Jane"}},  # the texts are sealed
    {"pre_filter": {"author": {"$eq": "Jane Doe"}}},
]


@pytest.fixture(params=[None, 4], ids=["single-stage", "two-stage"])
def store(request: pytest.FixtureRequest) -> SealedVectorStore:
    s = SealedVectorStore(
        InMemoryVectorStore,
        embedding=FakeAsymmetricEmbeddings(),
        key=generate_key(),
        sealed_metadata=("author",),
        fetch_k=request.param,
    )
    s.add_texts(TEXTS, METAS)
    return s


@pytest.mark.parametrize("kwargs", SEALED_FILTERS)
def test_every_filter_keyword_naming_a_sealed_field_is_refused(store: SealedVectorStore, kwargs: dict) -> None:
    vector = FakeAsymmetricEmbeddings().embed_query("x")
    calls = [
        lambda: store.similarity_search("x", k=1, **kwargs),
        lambda: store.similarity_search_with_score("x", k=1, **kwargs),
        lambda: store.similarity_search_by_vector(vector, k=1, **kwargs),
        lambda: store.max_marginal_relevance_search("x", k=1, **kwargs),
        lambda: asyncio.run(store.asimilarity_search("x", k=1, **kwargs)),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="sealed") as info:
            call()
        assert "Jane" not in str(info.value)


def test_plain_filters_still_work(store: SealedVectorStore) -> None:
    hits = store.similarity_search("x", k=2, filter=lambda doc: doc.metadata.get("topic") == "moves")
    assert [d.page_content for d in hits] == [TEXTS[0]]


def test_the_sealed_store_refuses_pickling_with_not_picklable_error(store: SealedVectorStore) -> None:
    with pytest.raises(NotPicklableError):
        pickle.dumps(store)
