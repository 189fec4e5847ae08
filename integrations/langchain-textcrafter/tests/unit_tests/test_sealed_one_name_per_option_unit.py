"""One way to choose a mode and one name per concept: ``search=`` with the exported options, ``tenant=``,
``open_k``. The old spellings (``fetch_k=``, ``context=``) keep working as before, with a DeprecationWarning
that names what to pass instead; LangChain's own MMR ``fetch_k`` is not one of them and never warns.
"""

from __future__ import annotations

import warnings

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

import langchain_textcrafter
from langchain_textcrafter import SealedVectorStore, StoreIndexSearch, TwoStageSearch
from textcrafter_rag import SingleStageSearch
from textcrafter_rag.sealing import generate_key

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KEY = generate_key()
TEXTS = ["alpha beta", "gamma delta", "epsilon zeta"]


class WordEmbeddings(Embeddings):
    """A tiny deterministic embedding: letter counts of a few letters."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0 + text.count(c) for c in "abdegilmnptz"]


def _store(**kwargs: object) -> SealedVectorStore:
    return SealedVectorStore(InMemoryVectorStore, embedding=WordEmbeddings(), key=KEY, **kwargs)  # type: ignore[arg-type]


def test_the_options_search_takes_are_exported_by_the_adapter() -> None:
    from textcrafter_rag.sealed.app_index import AppIndexSearch

    assert langchain_textcrafter.TwoStageSearch is TwoStageSearch
    assert langchain_textcrafter.StoreIndexSearch is StoreIndexSearch
    assert langchain_textcrafter.AppIndexSearch is AppIndexSearch


def test_fetch_k_still_chooses_candidates_and_warns_with_what_to_pass() -> None:
    with pytest.warns(DeprecationWarning, match=r"fetch_k=.*search=TwoStageSearch\(open_k=") as caught:
        store = _store(fetch_k=13)
    assert caught[0].filename == __file__  # points at the caller
    assert store.search_options == TwoStageSearch(open_k=13)
    with pytest.warns(DeprecationWarning, match="search=None"):
        single = _store(fetch_k=None)
    assert single.search_options == SingleStageSearch()


def test_search_and_tenant_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        store = _store(search=TwoStageSearch(open_k=13), tenant="acme")
        store.add_texts(TEXTS, ids=["1", "2", "3"])
        hits = store.max_marginal_relevance_search("alpha", k=2, fetch_k=3)  # MMR's own fetch_k: not deprecated
    assert len(hits) == 2


def test_context_is_the_deprecated_name_of_tenant_and_opens_the_same_records() -> None:
    writer = _store(search=StoreIndexSearch(), tenant="acme")
    writer.add_texts(TEXTS, ids=["1", "2", "3"])
    with pytest.warns(DeprecationWarning, match=r"context=.*use tenant="):
        reader = SealedVectorStore(writer.store, key=KEY, context="acme")
    assert [d.page_content for d in reader.get_by_ids(["2"])] == ["gamma delta"]
    other = SealedVectorStore(writer.store, key=KEY, tenant="other")
    assert other.get_by_ids(["2"]) == []
    with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning, match="context="):
        _store(tenant="a", context="b")


def test_the_store_names_the_records_a_query_reads_open_k_in_every_mode() -> None:
    store = _store(search=TwoStageSearch(open_k=3))
    store.add_texts(TEXTS)
    with pytest.raises(ValueError, match=r"exceeds this store's open_k=3: raise open_k"):
        store.similarity_search("alpha", k=4)
