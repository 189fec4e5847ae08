"""SealedVectorStore on LangChain's InMemoryVectorStore with a fake base: what the store and the base see."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_textcrafter import SealedVectorStore, SealError
from langchain_textcrafter.sealed_embeddings import SealedTextEmbeddings
from textcrafter_rag.sealed.layout import is_library_record
from textcrafter_rag.sealing import InvalidKeyError, Sealer, generate_key

TEXTS = ["Jane Doe moved to Leeds.", "Bob Smith paid by card 4111.", "Ann Lee called support."]
METAS = [{"author": "Jane Doe", "topic": "moves"}, {"author": "Bob Smith", "topic": "billing"}, {"topic": "support"}]


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings()


@pytest.fixture
def store(base: FakeAsymmetricEmbeddings) -> SealedVectorStore:
    return SealedVectorStore(
        InMemoryVectorStore, embedding=base, key=generate_key(), sealed_metadata=("author",), fetch_k=None
    )


@pytest.fixture
def inner(store: SealedVectorStore) -> InMemoryVectorStore:
    return store.store  # type: ignore[return-value]


def test_the_store_holds_ciphertext_and_the_vectors_of_the_plaintexts(store, inner, base) -> None:
    ids = store.add_texts(TEXTS, METAS, ids=["a", "b", "c"])
    assert ids == ["a", "b", "c"]
    data = {i for i, row in inner.store.items() if not is_library_record(row["metadata"])}  # not the marker
    assert data == set(store.store_ids(ids)) and not set(inner.store) & set(ids)  # keyed ids only
    for i, rid in enumerate(store.store_ids(ids)):
        row = inner.store[rid]
        assert Sealer.is_sealed(row["text"]) and "Doe" not in row["text"]
        assert row["metadata"]["topic"] == METAS[i]["topic"] and row["metadata"]["_tc_id"] == rid
        assert ("author" not in METAS[i]) or Sealer.is_sealed(row["metadata"]["author"])
        np.testing.assert_allclose(row["vector"], base.doc(TEXTS[i]))  # the plaintext's vector
    assert base.known.served["embed_documents"] == TEXTS  # one batch, plaintexts only, never a token
    assert isinstance(inner.embeddings, SealedTextEmbeddings) and store.embeddings is base


def test_hits_come_back_opened_and_inputs_are_untouched(store, base) -> None:
    docs = [Document(page_content=t, metadata=dict(m)) for t, m in zip(TEXTS, METAS, strict=True)]
    ids = store.add_documents(docs)
    assert all(d.id is None for d in docs) and docs[0].metadata == METAS[0]  # the caller's objects unchanged
    assert len(set(ids)) == 3  # UUID4s generated for documents without ids
    hit = store.similarity_search_by_vector(base.doc(TEXTS[1]), k=1)[0]
    assert (hit.id, hit.page_content, hit.metadata) == (ids[1], TEXTS[1], METAS[1])
    assert [d.page_content for d in store.get_by_ids([ids[2]])] == [TEXTS[2]]
    assert sorted(d.page_content for d in store.similarity_search(TEXTS[0], k=3)) == sorted(TEXTS)
    assert base.known.served["embed_query"] == [TEXTS[0]]  # queries go to the base as plaintext


def test_document_ids_and_explicit_ids(store, inner) -> None:
    docs = [Document(id="d1", page_content=TEXTS[0]), Document(page_content=TEXTS[1])]
    ids = store.add_documents(docs)
    sid = store.store_ids(["d1"])[0]
    assert ids[0] == "d1" and ids[1] != "d1" and inner.store[sid]["metadata"]["_tc_id"] == sid
    with pytest.raises(ValueError, match="2 ids for 1"):
        store.add_documents([Document(page_content="x")], ids=["p", "q"])
    with pytest.raises(ValueError, match="metadatas"):
        store.add_texts(["x"], [{}, {}])
    assert store.add_documents([]) == [] and store.add_texts([]) == []


def test_async_paths(store, base) -> None:
    async def run() -> None:
        ids = await store.aadd_texts(TEXTS, METAS)
        assert base.known.served["aembed_documents"] == TEXTS
        hits = await store.asimilarity_search_by_vector(base.doc(TEXTS[2]), k=1)
        assert hits[0].page_content == TEXTS[2]
        await store.adelete([ids[2]])
        assert await store.aget_by_ids([ids[2]]) == []

    asyncio.run(run())


def test_sealed_texts_never_get_embedded_as_ciphertext(store, inner) -> None:
    store.add_texts(TEXTS[:1], ids=["a"])
    token = inner.store[store.store_ids(["a"])[0]]["text"]
    with pytest.raises(SealError, match="not being added through"):
        inner.add_texts([token])  # the wrapped store used directly, with a sealed text
    # plain texts pass through (not sealed!), here under the id the sealed store looks "p" up under
    inner.add_texts(["a plain text added directly"], ids=store.store_ids(["p"]))
    with pytest.raises(SealError):
        store.get_by_ids(["p"])  # ...and a plaintext record never comes out of the sealed store


def test_filters_on_sealed_fields_are_refused(store) -> None:
    store.add_texts(TEXTS, METAS)
    for flt in ({"author": "Jane Doe"}, {"$and": [{"topic": "moves"}, {"author": "Jane Doe"}]}):
        with pytest.raises(ValueError, match="cannot filter on sealed"):
            store.similarity_search("x", k=1, filter=flt)


def test_two_wrappers_share_one_store_and_another_key_opens_nothing(store, inner, base) -> None:
    store.add_texts(TEXTS, METAS, ids=["a", "b", "c"])
    # the .store of a sealed store: its records, another key
    again = SealedVectorStore(inner, key=generate_key(), fetch_k=None)
    assert again.store is inner and again.embeddings is base
    assert again.get_by_ids(["a"]) == []  # another key's keyed id names no stored record
    with pytest.raises(SealError):
        again.similarity_search_by_vector(base.doc(TEXTS[0]), k=1)
    key = generate_key()
    first = SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, fetch_k=None)
    first.add_texts(TEXTS[:1], ids=["x"])
    # adds through a second wrapper are sealed and routed too
    second = SealedVectorStore(first.store, key=key, fetch_k=None)
    second.add_texts(TEXTS[1:2], ids=["y"])
    assert [d.page_content for d in first.get_by_ids(["x", "y"])] == TEXTS[:2]


def test_the_users_store_is_never_patched(base) -> None:
    """The old pattern (wrapping a store built with the user's embeddings by swapping its attribute) is gone."""
    user_store = InMemoryVectorStore(base)
    before = dict(vars(user_store))
    with pytest.raises(TypeError, match="function that builds the store"):
        SealedVectorStore(user_store, key=generate_key())
    assert vars(user_store) == before and user_store.embeddings is base

    def builds_with_other_embeddings(_: object) -> InMemoryVectorStore:
        return InMemoryVectorStore(base)

    with pytest.raises(TypeError, match="built with the embeddings it is given"):
        SealedVectorStore(builds_with_other_embeddings, embedding=base, key=generate_key())


def test_refusals(base) -> None:
    with pytest.raises(TypeError, match="function building"):
        SealedVectorStore(object(), embedding=base, key=generate_key())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Embeddings"):
        SealedVectorStore(InMemoryVectorStore, key=generate_key())
    with pytest.raises(InvalidKeyError):
        SealedVectorStore(InMemoryVectorStore, embedding=base, key="too short")
    with pytest.raises(TypeError, match="not a string"):
        SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key(), sealed_metadata="author")
    with pytest.raises(ValueError, match="reserved"):
        SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key()).add_texts(["t"], [{"_tc_vec": 1}])
    assert issubclass(SealedVectorStore, VectorStore)
