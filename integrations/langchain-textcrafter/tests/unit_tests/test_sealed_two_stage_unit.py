"""Two-stage SealedVectorStore on InMemoryVectorStore: what the store receives, what the app gets back."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore, cosine, exact_top
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError
from textcrafter_rag import GaussianNoise
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStage, TwoStageSearch
from textcrafter_rag.sealed.core import (
    ModeMismatchError,
    SkippedRecordsWarning,
    StoreRanksWarning,
)
from textcrafter_rag.sealing import Sealer, generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(30)]
IDS = [f"r{i}" for i in range(30)]


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _sealed(base, *, key: str | None = None, fetch_k: int | TwoStageSearch = 31, **kwargs) -> SealedVectorStore:
    """The whole store (30 records and its marker record) is fetched: the re-rank is exact whatever the key."""
    return SealedVectorStore(RecordingStore, embedding=base, key=key or generate_key(), fetch_k=fetch_k, **kwargs)


def _unrotated(key: str, vector, *, context: str = "") -> np.ndarray:
    """A stored vector with the tenant's secret rotation undone (what only the key holder can compute)."""
    rotation = TwoStage(key, context=context, search=TwoStageSearch()).rotation(len(vector))
    return rotation.invert(np.asarray([vector], dtype=np.float32))[0]


def _row(store: SealedVectorStore, rid: str) -> dict:
    """The wrapped InMemoryVectorStore's row of record ``rid`` (held under its keyed id)."""
    return store.store.store[store.store_ids([rid])[0]]


def _exact(base: FakeAsymmetricEmbeddings, query: str, k: int) -> list[str]:
    return exact_top(base, TEXTS, query, k)


def test_the_store_receives_candidate_vectors_and_sealed_clean_ones(base) -> None:
    key = generate_key()
    store = _sealed(base, key=key, fetch_k=TwoStageSearch(fetch_k=30, doc_strength=2.0))
    store.add_texts(TEXTS, ids=IDS)
    assert base.known.served["embed_documents"] == TEXTS  # one encoder call, plaintexts only
    for i, rid in enumerate(IDS):
        row = _row(store, rid)
        clean = base.doc(TEXTS[i])
        assert Sealer.is_sealed(row["metadata"]["_tc_vec"]) and Sealer.is_sealed(row["text"])
        assert np.linalg.norm(row["vector"]) == pytest.approx(1.0, abs=1e-5)
        assert cosine(row["vector"], clean) < 0.95  # far from the clean vector (about 1/sqrt(5) on average)
    rotated = [cosine(_row(store, r)["vector"], base.doc(t)) for r, t in zip(IDS, TEXTS)]
    assert abs(np.mean(rotated)) < 0.15  # rotated by the tenant's key: a guess cannot be compared without it
    cosines = [cosine(_unrotated(key, _row(store, r)["vector"]), base.doc(t)) for r, t in zip(IDS, TEXTS)]
    assert np.mean(cosines) == pytest.approx(1 / np.sqrt(5), abs=0.1)  # noise 2.0 under the rotation


def test_search_ranks_by_exact_cosine_and_never_sends_the_clean_query(base) -> None:
    store = _sealed(base)
    store.add_texts(TEXTS, ids=IDS)
    query = "who was treated at ward 3?"
    hits = store.similarity_search_with_score(query, k=5)
    assert [d.page_content for d, _ in hits] == _exact(base, query, 5)  # fetch_k = the whole store: exact
    clean_q = base.known.query_vector(query)
    for doc, score in hits:
        assert score == pytest.approx(cosine(clean_q, base.doc(doc.page_content)), abs=2e-3)  # float16 clean vectors
        assert "_tc_vec" not in doc.metadata and "_tc_id" not in doc.metadata
    sent = store.store.searched[-1]
    assert cosine(sent, clean_q) < 0.95  # a protected query reached the store (strength 0.5: cos ~ 0.89)
    store.similarity_search_with_score(query, k=5)
    assert store.store.searched[-1] == sent  # the same query is always sent the same way: nothing to average
    assert base.known.served["embed_query"] == [query, query]
    with pytest.raises(ValueError, match="exceeds this store's open_k"):
        store.similarity_search(query, k=32)


def test_by_vector_mmr_relevance_and_retriever(base) -> None:
    store = _sealed(base)
    store.add_texts(TEXTS, ids=IDS)
    q = base.known.query_vector("q")
    by_vector = store.similarity_search_by_vector(q, k=3)
    assert [d.page_content for d in by_vector] == _exact(base, "q", 3)
    assert cosine(store.store.searched[-1], q) < 0.95
    mmr = store.max_marginal_relevance_search("q", k=4, lambda_mult=1.0)  # lambda 1: plain relevance order
    assert [d.page_content for d in mmr] == _exact(base, "q", 4)
    diverse = store.max_marginal_relevance_search_by_vector(q, k=4, lambda_mult=0.0)
    assert len({d.page_content for d in diverse}) == 4
    scored = store.similarity_search_with_relevance_scores("q", k=5, score_threshold=0.0)
    assert all(s >= 0.0 for _, s in scored)
    assert [d.page_content for d in store.as_retriever(search_kwargs={"k": 2}).invoke("q")] == _exact(base, "q", 2)


def test_async_paths(base) -> None:
    store = _sealed(base)

    async def run() -> None:
        await store.aadd_texts(TEXTS, ids=IDS)
        assert base.known.served["aembed_documents"] == TEXTS
        hits = await store.asimilarity_search("q", k=3)
        assert [d.page_content for d in hits] == _exact(base, "q", 3)
        vec_hits = await store.asimilarity_search_by_vector(base.known.query_vector("q"), k=2)
        assert [d.page_content for d in vec_hits] == _exact(base, "q", 2)
        assert len(await store.amax_marginal_relevance_search("q", k=3)) == 3
        scored = await store.asimilarity_search_with_relevance_scores("q", k=2)
        assert [d.page_content for d, _ in scored] == _exact(base, "q", 2)

    asyncio.run(run())
    assert base.known.served["aembed_query"]


def test_every_copy_of_one_vector_gives_the_store_the_same_candidate(base) -> None:
    key = generate_key()
    first = _sealed(base, key=key)
    first.add_texts(TEXTS[:3], ids=IDS[:3])
    again = _sealed(base, key=key)
    again.add_texts(TEXTS[:3], ids=IDS[:3])
    for rid in IDS[:3]:
        assert _row(first, rid)["vector"] == _row(again, rid)["vector"]
    first.add_texts([TEXTS[0]] * 4)  # the same text again without ids: four new records, one release
    first.add_texts([TEXTS[0]], ids=["another-id"])
    r0 = _row(first, "r0")["vector"]
    copies = [r["vector"] for r in first.store.store.values() if np.allclose(r["vector"], r0, atol=1e-6)]
    assert len(copies) == 6  # equal up to the float rounding of a batch's matrix product
    other_tenant = _sealed(base, key=key, context="tenant-b")
    other_tenant.add_texts(TEXTS[:1], ids=IDS[:1])
    b_vector = _row(other_tenant, IDS[0])["vector"]
    assert other_tenant.store_ids(IDS[:1]) != first.store_ids(IDS[:1])  # another tenant's keyed id
    assert b_vector != _row(first, IDS[0])["vector"]  # another rotation ...
    np.testing.assert_allclose(  # ... of the same draw: two tenants under one key give nothing to average
        _unrotated(key, b_vector, context="tenant-b"), _unrotated(key, _row(first, "r0")["vector"]), atol=1e-5
    )


def test_records_that_do_not_open_are_skipped_counted_or_refused_in_strict_mode(base) -> None:
    key = generate_key()
    store = _sealed(base, key=key, fetch_k=40)
    store.add_texts(TEXTS, ids=IDS)
    meta0, meta1 = _row(store, "r0")["metadata"], _row(store, "r1")["metadata"]
    meta0["_tc_vec"], meta1["_tc_vec"] = meta1["_tc_vec"], meta0["_tc_vec"]
    with pytest.warns(SkippedRecordsWarning):
        hits = store.similarity_search("q", k=30 - 2)
    assert {d.id for d in hits} == set(IDS[2:]) and store.skipped == 2
    with pytest.raises(SealError):
        SealedVectorStore(store.store, key=key, fetch_k=40, strict=True).similarity_search("q", k=1)
    meta0["_tc_vec"], meta1["_tc_vec"] = meta1["_tc_vec"], meta0["_tc_vec"]
    del meta0["_tc_vec"]
    assert "r0" not in {d.id for d in store.similarity_search("q", k=29)}
    with pytest.raises(SealError, match="no sealed vector"):
        SealedVectorStore(store.store, key=key, fetch_k=40, strict=True).similarity_search("q", k=29)


def test_duplicate_hits_are_removed_and_at_most_fetch_k_are_opened(base) -> None:
    class Repeating(RecordingStore):
        def similarity_search_by_vector(self, embedding, k=4, **kwargs):
            hits = super().similarity_search_by_vector(embedding, k=k, **kwargs)
            return [hits[0]] * 4 + hits * 300  # a store that repeats hits and returns far more than asked

    store = SealedVectorStore(Repeating, embedding=base, key=generate_key(), fetch_k=30)
    store.add_texts(TEXTS, ids=IDS)
    ids = [d.id for d in store.similarity_search("q", k=4)]
    assert len(set(ids)) == 4 and ids == [d.id for d in store.similarity_search("q", k=4)]


def test_protected_embeddings_are_read_through_their_base_encoder(base) -> None:
    embeddings = ProtectedEmbeddings(base=base, mechanism=GaussianNoise(s=0.5, seed=0))
    store = SealedVectorStore(RecordingStore, embedding=embeddings, key=generate_key(), fetch_k=31)
    store.add_texts(TEXTS, ids=IDS)
    assert [d.page_content for d in store.similarity_search("q", k=3)] == _exact(base, "q", 3)


def test_copy_to_rekeys_without_the_encoder(base) -> None:
    old = _sealed(base)
    old.add_texts(TEXTS, [{"ward": i % 5} for i in range(30)], ids=IDS)
    served = list(base.known.served["embed_documents"])
    new = _sealed(base, context="rotated-2026")
    assert old.copy_to(new, IDS) == IDS
    assert base.known.served["embed_documents"] == served  # no text went through the encoder again
    assert [d.page_content for d in new.similarity_search("q", k=3)] == _exact(base, "q", 3)
    assert new.get_by_ids(["r4"])[0].metadata == {"ward": 4}
    assert _row(new, "r4")["vector"] != _row(old, "r4")["vector"]  # the new key's candidate
    with pytest.raises(SealError, match="wrong key"):
        SealedVectorStore(new.store, key=generate_key(), fetch_k=30).similarity_search("q", k=1)
    with pytest.raises(ValueError, match="not in this store"):
        old.copy_to(new, ["missing"])
    single = SealedVectorStore(InMemoryVectorStore, embedding=base, key=generate_key(), fetch_k=None)
    old.copy_to(single, IDS[:2])  # into a single-stage store: the target embeds the opened texts
    assert base.known.served["embed_documents"][-2:] == TEXTS[:2]
    moved = _sealed(base, context="moved")
    old.copy_to(moved, IDS[:3], delete_source=True)  # a move: the old release is gone
    assert old.get_by_ids(IDS[:3]) == [] and len(moved.get_by_ids(IDS[:3])) == 3


class NoReadByIdStore(InMemoryVectorStore):
    """A store without ``get_by_ids`` (as langchain-milvus): no index mode can fetch its records."""

    get_by_ids = VectorStore.get_by_ids


def test_the_store_held_index_is_the_default_and_older_stores_open_in_their_own_mode(base) -> None:
    key = generate_key()
    default = SealedVectorStore(InMemoryVectorStore, embedding=base, key=key)
    assert default.search_options == StoreIndexSearch()
    with pytest.warns(DeprecationWarning, match="search_options"):
        assert default.two_stage is None  # the old name of the candidate options, warned
    with pytest.warns(StoreRanksWarning, match="falls back to candidates"):
        fallback = SealedVectorStore(NoReadByIdStore, embedding=base, key=key)
    assert fallback.search_options == DEFAULT_SEARCH == TwoStageSearch(fetch_k=2000, recall=0.95)  # rounds to a target
    candidates = SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, search=DEFAULT_SEARCH)
    assert SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, fetch_k=200).search_options.recall is None
    candidates.add_texts(TEXTS[:3], ids=IDS[:3])
    row = _row(candidates, "r0")
    assert Sealer.is_sealed(row["metadata"]["_tc_vec"])  # the clean vector travels sealed
    assert not np.allclose(row["vector"], base.doc(TEXTS[0]))  # the store holds a candidate, not the vector
    reopened = SealedVectorStore(candidates.store, key=key)  # written in candidates: opened in candidates
    assert [d.page_content for d in reopened.similarity_search(TEXTS[1], k=1)] == [TEXTS[1]]
    assert reopened.search_options == DEFAULT_SEARCH
    single = SealedVectorStore(InMemoryVectorStore, embedding=base, key=key, fetch_k=None)
    single.add_texts(TEXTS[:3], ids=IDS[:3])
    with pytest.raises(ModeMismatchError, match="written in 'single' mode"):  # its marker names its mode
        SealedVectorStore(single.store, key=key).similarity_search("q", k=1)
    assert [d.page_content for d in SealedVectorStore(single.store, key=key, fetch_k=None).get_by_ids(["r1"])] == [
        TEXTS[1]
    ]


def test_a_store_refuses_to_be_opened_in_another_mode_before_the_query_is_sent(base) -> None:
    key = generate_key()
    two_stage = _sealed(base, key=key)
    two_stage.add_texts(TEXTS[:3], ids=IDS[:3])
    reopened = SealedVectorStore(two_stage.store, key=key, fetch_k=None)
    for search in (lambda: reopened.similarity_search("q", k=1), lambda: reopened.add_texts(["x"], ids=["x"])):
        with pytest.raises(ModeMismatchError, match="'candidates' mode"):
            search()
    assert two_stage.store.searched == []  # nothing, and above all no clean query, reached the store
    assert [d.page_content for d in reopened.get_by_ids(["r1"])] == [TEXTS[1]]  # reading by id still works


def test_a_new_text_beside_an_old_sealed_vector_does_not_open(base) -> None:
    key = generate_key()
    store = _sealed(base, key=key, fetch_k=40)
    store.add_texts(TEXTS[:3], ids=IDS[:3])
    old_vector = _row(store, "r0")["metadata"]["_tc_vec"]
    store.add_texts(["Patient 0 now reads differently."], ids=["r0"])  # an update of r0
    _row(store, "r0")["metadata"]["_tc_vec"] = old_vector  # the store splices the old vector back in
    strict = SealedVectorStore(store.store, key=key, fetch_k=40, strict=True)
    with pytest.raises(SealError):
        strict.similarity_search(TEXTS[0], k=3)
    with pytest.warns(SkippedRecordsWarning):
        assert "r0" not in [d.id for d in store.similarity_search(TEXTS[0], k=2)]


def test_deletes_refuse_filters_on_sealed_fields_and_the_store_never_serialises(base) -> None:
    import pickle

    from textcrafter_rag.errors import NotPicklableError

    store = _sealed(base, sealed_metadata=("author",))
    store.add_texts(TEXTS[:2], [{"author": "Jane Doe"}, {"author": "Bob"}], ids=IDS[:2])
    with pytest.raises(ValueError, match="sealed metadata field"):
        store.delete(IDS[:1], expr='author == "Jane Doe"')
    assert len(store.get_by_ids(IDS[:2])) == 2  # nothing was deleted, nothing was sent
    for serialise in (pickle.dumps, lambda s: s.__getstate__()):
        with pytest.raises(NotPicklableError):
            serialise(store)


def test_a_keyed_protected_embeddings_is_used_never_dropped(base) -> None:
    key = generate_key()
    same = ProtectedEmbeddings(base=base, mechanism=GaussianNoise(s=0.5, seed=0), key=key, tenant="t")
    store = SealedVectorStore(InMemoryVectorStore, embedding=same, key=key, fetch_k=31)  # the store's rotation
    store.add_texts(TEXTS, ids=IDS)
    assert [d.page_content for d in store.similarity_search("q", k=3)] == _exact(base, "q", 3)
    other = ProtectedEmbeddings(base=base, mechanism=GaussianNoise(s=0.5, seed=0), key=generate_key())
    with pytest.raises(ValueError, match="another key"):
        SealedVectorStore(InMemoryVectorStore, embedding=other, key=key)
    SealedVectorStore(InMemoryVectorStore, embedding=other, key=key, fetch_k=None)  # single-stage: its own key
