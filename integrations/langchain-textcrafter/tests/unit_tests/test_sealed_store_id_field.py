"""Stores that return a hit's id in a metadata field of their own (``langchain_milvus``: ``pk``)."""

from __future__ import annotations

from typing import Any

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore, SealError
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH
from textcrafter_rag.sealing import generate_key

TEXTS = ["Jane Doe moved to Leeds.", "Bob Smith paid by card 4111."]


class PrimaryKeyStore(InMemoryVectorStore):
    """Like ``langchain_milvus.Milvus``: ``Document.id`` empty, the id under ``metadata[self._primary_field]``."""

    def __init__(self, embedding: Any, primary_field: str = "pk") -> None:
        super().__init__(embedding)
        self._primary_field = primary_field

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        hits = super().similarity_search_with_score_by_vector(embedding, k=k, **kwargs)
        return [
            (Document(page_content=d.page_content, metadata={**d.metadata, self._primary_field: d.id}), score)
            for d, score in hits
        ]


@pytest.mark.parametrize("primary_field", ["pk", "doc_key"])
def test_hits_open_with_the_primary_key_field_and_moved_records_raise(primary_field: str) -> None:
    key = generate_key()
    store = SealedVectorStore(
        lambda e: PrimaryKeyStore(e, primary_field),
        embedding=FakeAsymmetricEmbeddings(),
        key=key,
        sealed_metadata=("author",),
        search=DEFAULT_SEARCH,  # candidates: the hits come from the store's own search, ids in its field
    )
    inner = store.store
    store.add_texts(TEXTS, [{"author": "Jane Doe"}, {"author": "Bob Smith"}], ids=["a", "b"])
    hit = store.similarity_search(TEXTS[1], k=1)[0]
    assert (hit.id, hit.page_content, hit.metadata["author"], hit.metadata[primary_field]) == (
        "b",
        TEXTS[1],
        "Bob Smith",
        "b",
    )
    a, b = store.store_ids(["a", "b"])
    inner.store[b] = {**inner.store[a], "id": b, "vector": inner.store[b]["vector"]}  # a's values on b
    assert [d.id for d in store.similarity_search(TEXTS[1], k=2)] == ["a"]  # b is skipped, counted
    assert store.skipped == 1
    with pytest.raises(SealError, match="moved"):
        SealedVectorStore(inner, key=key, sealed_metadata=("author",), strict=True).similarity_search(TEXTS[1], k=1)


def test_a_non_string_primary_field_attribute_falls_back_to_the_qdrant_field() -> None:
    def no_primary_field(embedding: Any) -> PrimaryKeyStore:
        inner = PrimaryKeyStore(embedding)
        inner._primary_field = None  # type: ignore[assignment]
        return inner

    store = SealedVectorStore(no_primary_field, embedding=FakeAsymmetricEmbeddings(), key=generate_key())
    inner = store.store
    store.add_texts(TEXTS, ids=["a", "b"])
    a, b = store.store_ids(["a", "b"])
    inner.store[b] = {**inner.store[a], "id": b, "vector": inner.store[b]["vector"]}
    hit = store.similarity_search(TEXTS[1], k=1)[0]  # no id field known: the stored _tc_id alone is used
    assert (hit.id, hit.page_content) == ("a", TEXTS[0])
