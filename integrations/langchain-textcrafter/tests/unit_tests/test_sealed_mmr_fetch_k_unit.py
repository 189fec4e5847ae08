"""MMR's ``fetch_k`` in sealed search: honoured (the picks come from the first ``fetch_k`` opened records), or
refused where a search opens fewer records; never silently ignored.

Four records with fixed vectors: A is closest to the query, B next and close to A, C and D far from both. With
``lambda_mult=0`` MMR takes the closest record first, then the one least like it: among all four that is D, among
the first two (``fetch_k=2``) it can only be B.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import generate_key

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DIM = 8


def _vector(*head: float) -> list[float]:
    v = np.zeros(DIM)
    v[: len(head)] = head
    return (v / np.linalg.norm(v)).tolist()


VECTORS = {
    "query": _vector(1.0),
    "A": _vector(1.0, 0.1),
    "B": _vector(0.9, 0.3),
    "C": _vector(0.3, 0.0, 1.0),
    "D": _vector(0.2, -0.6, 0.0, 1.0),
}


class FixedEmbeddings(Embeddings):
    """Each text's vector, fixed above (documents and queries alike)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [VECTORS[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return VECTORS[text]


MODES = {
    "candidates": lambda: TwoStageSearch(),
    "candidates-fixed": lambda: TwoStageSearch(fetch_k=10),
    "store-index": lambda: StoreIndexSearch(),
    "app-index": lambda: AppIndexSearch(),
}


@pytest.fixture(params=sorted(MODES))
def store(request: pytest.FixtureRequest) -> SealedVectorStore:
    sealed = SealedVectorStore(
        InMemoryVectorStore, embedding=FixedEmbeddings(), key=generate_key(), search=MODES[request.param]()
    )
    sealed.add_texts(["A", "B", "C", "D"])
    return sealed


def _texts(docs) -> set[str]:  # type: ignore[no-untyped-def]
    return {d.page_content for d in docs}


def test_mmr_picks_among_the_first_fetch_k_opened_records(store: SealedVectorStore) -> None:
    assert _texts(store.max_marginal_relevance_search("query", k=2, fetch_k=4, lambda_mult=0.0)) == {"A", "D"}
    assert _texts(store.max_marginal_relevance_search("query", k=2, fetch_k=2, lambda_mult=0.0)) == {"A", "B"}
    assert _texts(store.max_marginal_relevance_search("query", k=2, fetch_k=1, lambda_mult=0.0)) == {
        "A"
    }  # as LangChain
    by_vector = store.max_marginal_relevance_search_by_vector(VECTORS["query"], k=2, fetch_k=2, lambda_mult=0.0)
    assert _texts(by_vector) == {"A", "B"}

    async def run() -> tuple[set[str], set[str]]:
        text = await store.amax_marginal_relevance_search("query", k=2, fetch_k=2, lambda_mult=0.0)
        vector = await store.amax_marginal_relevance_search_by_vector(VECTORS["query"], k=2, fetch_k=2, lambda_mult=0.0)
        return _texts(text), _texts(vector)

    assert asyncio.run(run()) == ({"A", "B"}, {"A", "B"})
    retriever = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 2, "lambda_mult": 0.0})
    assert _texts(retriever.invoke("query")) == {"A", "B"}


def test_a_fetch_k_beyond_what_a_search_opens_is_refused(store: SealedVectorStore) -> None:
    opened = store._search.open_k  # type: ignore[union-attr]
    with pytest.raises(InvalidInputError, match=rf"fetch_k={opened + 1} exceeds .* \(its open_k\)"):
        store.max_marginal_relevance_search("query", k=2, fetch_k=opened + 1)
    with pytest.raises(InvalidInputError, match="exceeds"):
        asyncio.run(store.amax_marginal_relevance_search_by_vector(VECTORS["query"], k=2, fetch_k=opened + 1))
    for bad in (0, -3, True, 2.5):
        with pytest.raises(InvalidInputError, match="fetch_k must be a positive int"):
            store.max_marginal_relevance_search("query", k=2, fetch_k=bad)  # type: ignore[arg-type]
