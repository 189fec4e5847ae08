"""The same contract as the LangChain adapter: one way to choose a mode, one name per concept, one embeddings rule.

* ``search=`` with the exported options chooses the mode; ``fetch_k=`` keeps working with a DeprecationWarning
  naming ``search=TwoStageSearch(open_k=...)``; ``context=`` is the deprecated name of ``tenant=``.
* A sealed store reads a ``ProtectedEmbedding`` through its base encoder (as LangChain's ``SealedVectorStore``
  reads ``ProtectedEmbeddings``): the index may embed with the same ``ProtectedEmbedding`` it gives the store,
  and every score is the exact cosine of the clean vectors; a keyed one must hold the store's key.
"""

from __future__ import annotations

import warnings

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode

import llama_index.embeddings.textcrafter as adapter
from llama_index.embeddings.textcrafter import (
    ProtectedEmbedding,
    ReportedVectorsWarning,
    SealedKVStore,
    SealedVectorStore,
    StoreIndexSearch,
    TwoStageSearch,
    sealed_storage_context,
)
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealing import SealError, generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import NOTE_IDS, NOTES, FakeBase, cosine

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient


def _qdrant() -> QdrantVectorStore:
    return QdrantVectorStore(client=QdrantClient(":memory:"), collection_name="notes")


def test_the_options_search_takes_are_exported_by_the_adapter() -> None:
    from textcrafter_rag import AppIndexSearch

    assert (adapter.TwoStageSearch, adapter.StoreIndexSearch, adapter.AppIndexSearch) == (
        TwoStageSearch,
        StoreIndexSearch,
        AppIndexSearch,
    )


def test_fetch_k_still_chooses_candidates_and_warns_with_what_to_pass() -> None:
    key = generate_key()
    with pytest.warns(DeprecationWarning, match=r"fetch_k=.*search=TwoStageSearch\(open_k=") as caught:
        store = SealedVectorStore(_qdrant(), key=key, fetch_k=13)
    assert caught[0].filename == __file__
    assert store.search_options == TwoStageSearch(open_k=13)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ctx = sealed_storage_context(vector_store=_qdrant(), key=key, fetch_k=13)
    deprecations = [w for w in seen if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1 and deprecations[0].filename == __file__  # once, at the caller
    assert ctx.vector_store.search_options == TwoStageSearch(open_k=13)


def test_context_is_the_deprecated_name_of_tenant_everywhere() -> None:
    key = generate_key()
    with pytest.warns(DeprecationWarning, match=r"SealedVectorStore\(context=\).*use tenant="):
        SealedVectorStore(_qdrant(), key=key, context="acme")
    with pytest.warns(DeprecationWarning, match=r"sealed_storage_context\(context=\)"):
        sealed_storage_context(vector_store=_qdrant(), key=key, context="acme")
    with pytest.warns(DeprecationWarning, match=r"SealedKVStore\(context=\)"):
        old = SealedKVStore(key=key, context="acme")
    new = SealedKVStore(old.store, key=key, tenant="acme")
    old.put("k", {"v": 1})
    assert new.get("k") == {"v": 1}  # the same tenant under either name
    with pytest.raises(SealError, match="wrong key or tenant"):
        SealedKVStore(old.store, key=key, tenant="other").get("k")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        sealed_storage_context(vector_store=_qdrant(), key=key, tenant="acme", search=StoreIndexSearch())


@pytest.mark.parametrize("search", [StoreIndexSearch(), TwoStageSearch(open_k=24)], ids=["store-index", "candidates"])
def test_a_protected_embedding_is_read_through_its_base_as_in_langchain(search) -> None:
    base = FakeBase(known=KnownVectors(dim=32))
    protected = ProtectedEmbedding(base=base, mechanism="gaussian:s=0.3", seed=1)
    store = SealedVectorStore(_qdrant(), key=generate_key(), search=search, embed_model=protected)
    nodes = [TextNode(id_=i, text=t) for i, t in zip(NOTE_IDS, NOTES, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReportedVectorsWarning)  # nothing a handler saw reaches the store
        index = VectorStoreIndex(
            nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=protected
        )
        hits = index.as_retriever(similarity_top_k=3).retrieve(NOTES[5])
    query = base.query(NOTES[5])
    exact = sorted((cosine(base.doc(t), query) for t in NOTES), reverse=True)[:3]
    assert [h.score for h in hits] == pytest.approx(exact, abs=0.02)  # the clean vectors, not the noised ones


def test_a_keyed_protected_embedding_must_hold_the_store_s_key() -> None:
    base = FakeBase(known=KnownVectors(dim=32))
    protected = ProtectedEmbedding(base=base, mechanism="gaussian:s=0.01", key=generate_key())
    with pytest.raises(InvalidInputError, match="another key than this sealed store"):
        SealedVectorStore(_qdrant(), key=generate_key(), search=StoreIndexSearch(), embed_model=protected)
