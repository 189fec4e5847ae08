"""Issue 28, items 4 and 6 on the LlamaIndex sealed store: string filters in store keywords; no silent pickling."""

from __future__ import annotations

import copy
import pickle

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters, SimpleVectorStore, VectorStoreQuery

from llama_index.embeddings.textcrafter import SealedVectorStore
from textcrafter_rag import SingleStageSearch
from textcrafter_rag.errors import NotPicklableError
from textcrafter_rag.sealing import generate_key


@pytest.fixture
def sealed() -> SealedVectorStore:
    inner = SimpleVectorStore()
    inner.stores_text = True
    store = SealedVectorStore(inner, key=generate_key(), sealed_metadata=("author",), search=SingleStageSearch())
    store.add([TextNode(text="Jane Doe moved.", metadata={"author": "Jane Doe", "topic": "m"}, embedding=[1.0, 0.0])])
    return store


@pytest.mark.parametrize(
    ("filters", "kwargs"),
    [
        (None, {"expr": 'author == "Jane Doe"'}),  # a string in a store keyword was skipped
        (None, {"expr": 'metadata["author"] == "Jane Doe"'}),
        (None, {"filter": '$meta["author"] == "Jane Doe"'}),
        (None, {"where": {"author": "Jane Doe"}}),
        (None, {"where_document": {"$contains": "Jane"}}),
        (MetadataFilters(filters=[MetadataFilter(key='metadata["author"]', value="Jane Doe")]), {}),
    ],
)
def test_filters_naming_a_sealed_field_are_refused(sealed: SealedVectorStore, filters, kwargs: dict) -> None:
    query = VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=1, filters=filters)
    with pytest.raises(ValueError, match="sealed") as info:
        sealed.query(query, **kwargs)
    assert "Jane" not in str(info.value)


def test_plain_filters_pass(sealed: SealedVectorStore) -> None:
    flt = MetadataFilters(filters=[MetadataFilter(key="topic", value="m")])
    result = sealed.query(VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=1, filters=flt))
    assert len(result.ids or []) == 1


def test_pickling_refuses_instead_of_silently_dropping_the_key(sealed: SealedVectorStore) -> None:
    """LlamaIndex's own __getstate__ dropped the unpicklable key holders and pickled the rest, without a word."""
    with pytest.raises(NotPicklableError):
        pickle.dumps(sealed)
    with pytest.raises(NotPicklableError):
        sealed.__getstate__()
    for twin in (sealed.model_copy(), copy.copy(sealed), copy.deepcopy(sealed)):  # copies work and still open
        assert twin.sealed_metadata == ("author",) and twin.open_node(sealed.seal_node(TextNode(text="t"))).text == "t"
