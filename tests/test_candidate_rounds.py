"""Candidate search in rounds (``TwoStageSearch(recall=...)``): the stopping rule, the cap, old records.

The store here is an exact inner-product scan of what :class:`SealedSearch` sends it, so every number below is
a property of the rule, not of an index's approximation. Data are seeded clustered vectors: the test is
deterministic.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch, pack_vector, unpack_vector
from textcrafter_rag.sealed.core import MODE_KEY, SealedSearch
from textcrafter_rag.sealed.rounds import RecallCapWarning, rule_met, score_noise
from textcrafter_rag.sealing import SecretKey

KEY = SecretKey(bytes(range(32)))


def _clustered(n: int, dim: int, *, seed: int, queries: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` documents and ``queries`` queries around 40 shared centres (cosine about 0.5 within a cluster)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, dim))
    x = centres[rng.integers(0, 40, n + queries)] + rng.standard_normal((n + queries, dim))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return x[:n], x[n:]


class ScanStore:
    """What a store holds for each record, and an exact scan: enough to drive :meth:`SealedSearch.rounds`."""

    def __init__(self, core: SealedSearch, clean: np.ndarray, *, seal: TwoStage | None = None) -> None:
        self.ids = [f"r{i}" for i in range(len(clean))]
        self.vectors = core.store_vectors(clean, self.ids)
        sealer = seal or core._two_stage
        self.tokens = [sealer.seal_vector(v, record_id=r) for v, r in zip(clean, self.ids)]
        self.calls: list[int] = []

    def fields(self, hits: list[int]) -> list[tuple]:
        return [(self.ids[i], None, self.tokens[i], "candidates", None) for i in hits]

    def search(self, query: np.ndarray, k: int) -> list[int]:
        self.calls.append(k)
        return np.argsort(-(self.vectors @ query[0]), kind="stable")[:k].tolist()


def _search(core: SealedSearch, store: ScanStore, query: np.ndarray, k: int) -> tuple[list[str], object]:
    rounds = core.rounds(query, k, store.fields)
    protected = core.store_query(query)
    while rounds.size is not None:
        rounds.take(store.search(protected, rounds.size))
    ranked = core.rank(query, rounds.vectors, k)
    return [rounds.record_ids[i] for i, _ in ranked], rounds


@pytest.mark.parametrize("recall", [0.9, 0.99])
def test_the_rule_reaches_its_recall_target_on_a_held_out_store(recall: float) -> None:
    """Each record of the top 10 that a full scan would rank (over the sealed vectors, as the app ranks) is found
    with at least the target probability, averaged over queries; and far fewer records are read than a scan."""
    docs, queries = _clustered(6000, 384, seed=1, queries=60)
    core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=6000, recall=recall))
    store = ScanStore(core, docs)
    sealed = np.stack([unpack_vector(pack_vector(d)) for d in docs])
    sealed /= np.linalg.norm(sealed, axis=1, keepdims=True)  # the app ranks by cosine
    found = fetched = 0
    for q in queries:
        got, rounds = _search(core, store, q, 10)
        full_scan = {f"r{i}" for i in np.argsort(-(sealed @ q), kind="stable")[:10]}
        found += len(full_scan & set(got))
        fetched += len(rounds.hits)
    assert found / (10 * len(queries)) >= recall
    assert fetched < len(queries) * len(docs) / 5
    assert core.capped == 0


def test_a_higher_target_fetches_more_and_a_fixed_fetch_k_is_one_round() -> None:
    docs, (q,) = _clustered(3000, 384, seed=3)
    sizes = {}
    for recall in (0.8, 0.999):
        core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=3000, recall=recall))
        store = ScanStore(core, docs)
        _, rounds = _search(core, store, q, 10)
        sizes[recall] = len(rounds.hits)
        assert store.calls[0] == 100 and all(b == min(2 * a, 3000) for a, b in zip(store.calls, store.calls[1:]))
    assert sizes[0.8] < sizes[0.999]
    fixed = SealedSearch(KEY, options=TwoStageSearch(fetch_k=150))
    store = ScanStore(fixed, docs)
    _search(fixed, store, q, 10)
    assert store.calls == [150]


def test_reaching_fetch_k_first_is_counted_and_warned_once_never_silent() -> None:
    docs, queries = _clustered(3000, 384, seed=5, queries=3)
    core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=120, recall=0.999))
    store = ScanStore(core, docs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for q in queries:
            _, rounds = _search(core, store, q, 10)
            assert rounds.capped and len(rounds.hits) == 120
    assert core.capped == 3
    assert [w.category for w in caught] == [RecallCapWarning]
    assert store.calls == [100, 120] * 3


def test_a_store_with_fewer_records_than_asked_for_ends_the_rounds() -> None:
    docs, _ = _clustered(40, 32, seed=7)
    core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=1000, recall=0.999))
    store = ScanStore(core, docs)
    got, rounds = _search(core, store, docs[0], 5)
    assert store.calls == [100] and len(rounds.hits) == 40 and got[0] == "r0"
    assert core.capped == 0


def test_records_sealed_without_a_noise_seed_are_never_taken_for_a_met_rule() -> None:
    """Records from the release before seeds were sealed: no store score is known, so no round stops early."""
    docs, (q,) = _clustered(2000, 384, seed=8)
    core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=800, recall=0.9))
    legacy = TwoStage(KEY, search=TwoStageSearch(doc_strength=0.0))  # seals no seed, as the old records
    store = ScanStore(core, docs, seal=legacy)
    with pytest.warns(RecallCapWarning):
        _, rounds = _search(core, store, q, 10)
    assert store.calls == [100, 200, 400, 800] and rounds.capped
    seeded = ScanStore(core, docs)
    _search(core, seeded, q, 10)
    assert len(seeded.calls) < 4  # the same store with seeds stops before the cap


def test_the_sealed_seed_rebuilds_the_score_the_store_gave() -> None:
    docs, (q,) = _clustered(50, 48, seed=10)
    core = SealedSearch(KEY, options=TwoStageSearch(recall=0.99))
    store = ScanStore(core, docs)
    two = core._two_stage
    vectors, seeds = zip(*(two.open_vector_and_seed(t, record_id=r) for t, r in zip(store.tokens, store.ids)))
    rebuilt = two.noised(np.stack(vectors).astype(np.float64), list(seeds), 2.0) @ two.query_unit(q)
    np.testing.assert_allclose(rebuilt, store.vectors @ core.store_query(q)[0], atol=0.01)


def test_score_model_and_options_are_checked() -> None:
    a, sigma = score_noise(doc_strength=2.0, query_strength=0.5, dim=384, t=0.6)
    assert a == pytest.approx(0.4) and 0.04 < sigma < 0.05
    search = TwoStageSearch(recall=0.99)
    top = np.full(10, 0.6)
    assert rule_met(top, 0.24 - 2.4 * sigma, k=10, recall=0.99, search=search, dim=384)  # 2.33 deviations: 0.99
    assert not rule_met(top, 0.24 - 2.2 * sigma, k=10, recall=0.99, search=search, dim=384)
    assert not rule_met(top, None, k=10, recall=0.99, search=search, dim=384)  # nothing scored: never stops
    assert not rule_met(top[:5], -1.0, k=10, recall=0.99, search=search, dim=384)  # fewer than k found
    for bad in (1.0, 0.5, 2, True, "0.9"):
        with pytest.raises(InvalidInputError):
            TwoStageSearch(recall=bad)
    assert MODE_KEY == "_tc_mode"
