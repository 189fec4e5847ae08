"""A user's callable filter sees the user's records only: never the library's marker or index log records.

The sealed store keeps records of its own in the wrapped store (the marker of every sealed-search store, and the
store-held index's log heads and segments); they hold no user field, so a filter reading one raised ``KeyError``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import faiss
import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.layout import LIBRARY_FIELDS, is_library_record
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import generate_key

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's own notice
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TEXTS = ["Jane Doe moved to Leeds.", "Bob Smith paid by card.", "Ann Lee changed wards."]
METAS = [{"topic": "moves"}, {"topic": "billing"}, {"topic": "moves"}]
DIM = 8


class Seen:
    """A user's filter that reads a field every user record has, and remembers what it was handed."""

    def __init__(self, *, metadata_only: bool = False) -> None:
        self.handed: list[dict[str, Any]] = []
        self.metadata_only = metadata_only

    def __call__(self, record: Any) -> bool:
        metadata = record if self.metadata_only else record.metadata
        self.handed.append(dict(metadata))
        return metadata["topic"] == "moves"  # KeyError on a record without the user's field


def _faiss(embedding: Any) -> FAISS:
    return FAISS(
        embedding_function=embedding, index=faiss.IndexFlatIP(DIM), docstore=InMemoryDocstore(), index_to_docstore_id={}
    )


@pytest.mark.parametrize("search", [None, TwoStageSearch()], ids=["single-stage", "candidates"])
def test_a_callable_filter_never_sees_the_marker_and_still_filters(search: TwoStageSearch | None) -> None:
    store = SealedVectorStore(
        InMemoryVectorStore, embedding=FakeAsymmetricEmbeddings(), key=generate_key(), search=search
    )
    store.add_texts(TEXTS, METAS)
    if search is not None:  # the marker record sits in the store beside the user's records
        assert any(is_library_record(v["metadata"]) for v in store.store.store.values())
    seen = Seen()
    hits = store.similarity_search("where did Jane go?", k=3, filter=seen)
    assert sorted(d.page_content for d in hits) == sorted([TEXTS[0], TEXTS[2]])
    assert len(seen.handed) >= len(TEXTS) and not any(is_library_record(m) for m in seen.handed)
    # every search path hands the filter on the same way
    seen = Seen()
    assert {d.page_content for d in store.max_marginal_relevance_search("Jane", k=2, fetch_k=3, filter=seen)} <= {
        TEXTS[0],
        TEXTS[2],
    }
    assert asyncio.run(store.asimilarity_search("Jane", k=2, filter=seen))
    assert store.similarity_search_with_score("Jane", k=2, filter=seen)
    assert seen.handed and not any(is_library_record(m) for m in seen.handed)


def test_another_tenant_s_marker_and_index_log_never_reach_the_filter() -> None:
    """A second tenant in the store-held index (the default) writes its marker and log into the same store."""
    key = generate_key()
    mine = SealedVectorStore(
        InMemoryVectorStore, embedding=FakeAsymmetricEmbeddings(), key=key, context="a", search=TwoStageSearch()
    )
    mine.add_texts(TEXTS, METAS)
    theirs = SealedVectorStore(mine.store, key=key, context="b", search=StoreIndexSearch())
    theirs.add_texts(["Cy Young was discharged."], [{"topic": "discharges"}])
    held = [v["metadata"] for v in mine.store.store.values()]
    assert {field for m in held for field in LIBRARY_FIELDS if field in m} == set(LIBRARY_FIELDS)
    seen = Seen()
    hits = mine.similarity_search("Jane", k=2, filter=seen)
    assert {d.page_content for d in hits} == {TEXTS[0], TEXTS[2]}
    assert not any(is_library_record(m) for m in seen.handed)
    assert any(m["topic"] == "discharges" for m in seen.handed)  # the other tenant's data: the user's to filter


def test_a_faiss_filter_is_handed_metadata_and_never_the_marker() -> None:
    """FAISS calls a callable filter with each record's metadata dict, not a Document."""
    store = SealedVectorStore(_faiss, embedding=FakeAsymmetricEmbeddings(), key=generate_key(), search=TwoStageSearch())
    store.add_texts(TEXTS, METAS)
    seen = Seen(metadata_only=True)
    hits = store.similarity_search("Jane", k=2, filter=seen)
    assert {d.page_content for d in hits} == {TEXTS[0], TEXTS[2]}
    assert seen.handed and not any(is_library_record(m) for m in seen.handed)


def test_the_library_s_records_are_never_a_result() -> None:
    """Single-stage results pass over records of the library's own that a store returns (another tenant's marker)."""
    key = generate_key()
    plain = SealedVectorStore(InMemoryVectorStore, embedding=FakeAsymmetricEmbeddings(), key=key, search=None)
    plain.add_texts(TEXTS, METAS)
    vector = FakeAsymmetricEmbeddings().known.query_vector("Jane")  # ranked first: the store returns it
    metadata = {LIBRARY_FIELDS[0]: "candidates", "topic": "moves"}  # as another tenant's marker in a shared store
    plain.store.store["m"] = {"id": "m", "vector": vector, "text": "sealed", "metadata": metadata}
    hits = plain.similarity_search("Jane", k=len(TEXTS) + 1)
    assert sorted(d.page_content for d in hits) == sorted(TEXTS)
