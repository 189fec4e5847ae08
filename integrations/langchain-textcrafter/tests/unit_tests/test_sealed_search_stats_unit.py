"""``store.stats`` and the ``textcrafter_rag`` logger on the LangChain sealed store.

``RecallCapWarning`` is shown once per store object, which in a server is once in total: every capped search
is also an INFO record, and the counters say how many searches there were and how many were capped.
"""

from __future__ import annotations

import logging
import warnings

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.logs import SearchStats
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.core import UnprotectedVectorsWarning
from textcrafter_rag.sealed.rounds import RecallCapWarning
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Note {i}: patient treated for condition {i % 11} in ward {i % 13}." for i in range(260)]


def _capped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "textcrafter_rag" and "short of its recall target" in r.getMessage()]


def test_every_capped_search_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """The setting of the rounds tests that caps every search: 260 records, fetch_k=120, recall 0.999."""
    base = FakeAsymmetricEmbeddings(KnownVectors(dim=32))
    search = TwoStageSearch(fetch_k=120, recall=0.999)
    store = SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key(), search=search)
    store.add_texts(TEXTS)
    assert store.stats == SearchStats()
    caplog.set_level(logging.INFO, logger="textcrafter_rag")
    with pytest.warns(RecallCapWarning):
        store.similarity_search("condition 1", k=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecallCapWarning)  # warned once per store object ...
        store.similarity_search("ward 2", k=5)
        store.max_marginal_relevance_search("ward 3", k=5, fetch_k=20)
    assert len(_capped(caplog)) == store.capped == 3  # ... logged at each capped search
    assert all(r.levelno == logging.INFO for r in _capped(caplog))
    assert store.stats == SearchStats(searches=3, capped_searches=3, dead_entries_skipped=0, records_skipped=0)


def test_dead_index_entries_and_single_stage_stats(caplog: pytest.LogCaptureFixture) -> None:
    base = FakeAsymmetricEmbeddings()
    store = SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key(), search=StoreIndexSearch())
    store.add_texts(["Jane moved.", "Bob paid.", "Ann left."], ids=["j", "b", "a"])
    store.store.delete(store.store_ids(["b"]))  # behind the sealed store's back: its index entry stays
    caplog.set_level(logging.INFO, logger="textcrafter_rag")
    assert len(store.similarity_search("who?", k=2)) == 2
    assert store.stats == SearchStats(searches=1, capped_searches=0, dead_entries_skipped=1, records_skipped=0)
    assert any("have no record in the store" in r.getMessage() for r in caplog.records if r.name == "textcrafter_rag")
    with pytest.warns(UnprotectedVectorsWarning):
        plain = SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key(), search=None)
    plain.add_texts(["Jane moved."])
    plain.similarity_search("who?", k=1)
    assert plain.stats == SearchStats()  # the store ranks: no sealed search to count
