"""SealedVectorStore with the app-side index (``search=AppIndexSearch(...)``): the store ranks nothing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore, cosine, exact_top
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.app_index import AppIndexSearch, IndexConflictError
from textcrafter_rag.sealed.candidates import pack_vector, unpack_vector
from textcrafter_rag.sealed.core import IndexMissingError, ModeMismatchError
from textcrafter_rag.sealing import Sealer, generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(40)]
IDS = [f"r{i}" for i in range(40)]


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _exact(base: FakeAsymmetricEmbeddings, query: str, k: int) -> list[str]:
    return exact_top(base, TEXTS, query, k)


def _indexed(base, key: str, **options) -> SealedVectorStore:
    return SealedVectorStore(RecordingStore, embedding=base, key=key, search=AppIndexSearch(open_k=20, **options))


def test_the_store_holds_keyed_random_vectors_and_is_never_searched(base) -> None:
    store = _indexed(base, generate_key())
    store.add_texts(TEXTS, ids=IDS)
    for query in ("who was treated at ward 3?", "condition 5"):
        hits = store.similarity_search_with_score(query, k=5)
        assert [d.page_content for d, _ in hits] == _exact(base, query, 5)
        assert all(
            s == pytest.approx(cosine(base.known.query_vector(query), base.doc(d.page_content)), abs=1e-2)
            for d, s in hits
        )
    assert store.store.searched == []  # the app-side index ranked; the store was only read by id
    sids = store.store_ids(IDS)
    rows = [r for rid, r in store.store.store.items() if rid in sids]
    assert len(rows) == len(IDS) and all(
        Sealer.is_sealed(r["text"]) and r["metadata"]["_tc_mode"] == "index" for r in rows
    )
    cosines = [cosine(r["vector"], base.doc(TEXTS[sids.index(r["id"])])) for r in rows]
    assert max(abs(c) for c in cosines) < 0.7  # random 32-d directions, unrelated to the text
    again = store.similarity_search_by_vector(base.known.query_vector("condition 5"), k=3)
    assert [d.page_content for d in again] == _exact(base, "condition 5", 3)
    mmr = store.max_marginal_relevance_search("condition 5", k=3, lambda_mult=1.0)
    assert [d.page_content for d in mmr] == _exact(base, "condition 5", 3)


def test_codes_once_trained_and_deletes_reach_the_index(base) -> None:
    texts = [f"record {i} about topic {i % 11} in ward {i % 3}" for i in range(400)]
    store = SealedVectorStore(
        RecordingStore, embedding=base, key=generate_key(), search=AppIndexSearch(open_k=60, train_at=300, code_bytes=8)
    )
    store.add_texts(texts[:250], ids=[f"d{i}" for i in range(250)])
    store.add_texts(texts[250:], ids=[f"d{i}" for i in range(250, 400)])
    q = base.known.query_vector("topic 4")
    truth = [texts[i] for i in np.argsort([-cosine(q, unpack_vector(pack_vector(base.doc(t)))) for t in texts])[:5]]
    assert [d.page_content for d in store.similarity_search("topic 4", k=5)] == truth
    store.delete([f"d{texts.index(truth[0])}"])
    assert truth[0] not in [d.page_content for d in store.similarity_search("topic 4", k=5)]


def test_the_sealed_index_file_lets_a_new_process_search_at_once(base, tmp_path) -> None:
    key, path = generate_key(), tmp_path / "docs.tcidx"
    store = _indexed(base, key, index_path=path)
    store.add_texts(TEXTS, ids=IDS)
    served = len(base.known.served["embed_documents"])
    reopened = SealedVectorStore(store.store, key=key, search=AppIndexSearch(open_k=20, index_path=path))
    assert [d.page_content for d in reopened.similarity_search("condition 2", k=3)] == _exact(base, "condition 2", 3)
    assert len(base.known.served["embed_documents"]) == served  # nothing was embedded again
    reopened.delete(["r0"])
    with pytest.raises(IndexConflictError):
        store.add_texts(["one more"], ids=["r99"])  # the first writer is stale now: refused, not merged
    assert b"Patient" not in path.read_bytes()


def test_refusals_filters_k_stores_without_get_by_ids_and_another_mode(base) -> None:
    key = generate_key()
    store = _indexed(base, key)
    store.add_texts(TEXTS, ids=IDS)
    with pytest.raises(ValueError, match="passes nothing to the store"):
        store.similarity_search("q", k=2, filter=lambda d: True)
    with pytest.raises(ValueError, match="open_k=20"):
        store.similarity_search("q", k=21)

    class NoGet(InMemoryVectorStore):
        get_by_ids = VectorStore.get_by_ids

    with pytest.raises(ValueError, match="get_by_ids"):
        SealedVectorStore(NoGet, embedding=base, key=key, search=AppIndexSearch())
    with pytest.raises(ModeMismatchError, match="'index' mode"):
        SealedVectorStore(store.store, key=key, fetch_k=50).similarity_search("q", k=1)
    with pytest.raises(ValueError, match="not both"):
        SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, fetch_k=10, search=AppIndexSearch())


def test_copy_from_candidates_into_an_index_store_and_async(base) -> None:
    key = generate_key()
    old = SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, fetch_k=50)
    old.add_texts(TEXTS, ids=IDS)
    served = list(base.known.served["embed_documents"])
    new = _indexed(base, key)
    old.copy_to(SealedVectorStore(new.store, key=key, search=AppIndexSearch(open_k=20)), IDS, delete_source=True)
    assert base.known.served["embed_documents"] == served and old.get_by_ids(IDS) == []

    async def run() -> None:
        fresh = _indexed(base, generate_key())
        await fresh.aadd_texts(TEXTS, ids=IDS)
        hits = await fresh.asimilarity_search("condition 1", k=4)
        assert [d.page_content for d in hits] == _exact(base, "condition 1", 4)
        await fresh.adelete(["r1"])
        assert "r1" not in [d.id for d in await fresh.asimilarity_search("condition 1", k=4)]

    asyncio.run(run())


def test_a_process_without_the_index_is_told_so_and_a_new_store_answers_empty(base) -> None:
    from textcrafter_rag.sealed.core import IndexMissingError

    key = generate_key()
    assert _indexed(base, key).similarity_search("q", k=2) == []  # nothing written yet: nothing found
    store = _indexed(base, key)
    store.add_texts(TEXTS, ids=IDS)
    without = SealedVectorStore(store.store, key=key, search=AppIndexSearch(open_k=20))  # another process
    with pytest.raises(IndexMissingError, match="index_path"):
        without.similarity_search("q", k=2)


def test_a_store_written_with_the_app_side_index_opens_in_it_when_no_mode_is_named(base, tmp_path) -> None:
    """No search= given: a store whose marker names the app-side index opens in that mode (as one written in
    candidates opens in candidates), so the error names the file to give, not a mode mismatch; with the file it
    searches. Nothing was sent to the store for the refused search."""
    key = generate_key()
    path = tmp_path / "index.sealed"
    written = _indexed(base, key, index_path=path)
    written.add_texts(TEXTS, ids=IDS)
    reopened = SealedVectorStore(written.store, key=key)  # the default: the store-held index, until the marker
    with pytest.raises(IndexMissingError, match="index_path"):
        reopened.similarity_search(TEXTS[3], k=1)
    assert isinstance(reopened.search_options, AppIndexSearch)
    with_file = SealedVectorStore(written.store, key=key, search=AppIndexSearch(open_k=20, index_path=path))
    assert [d.page_content for d in with_file.similarity_search(TEXTS[3], k=3)] == _exact(base, TEXTS[3], 3)
