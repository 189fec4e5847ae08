"""Two-stage search core: keyed candidate noise, sealed clean vectors, exact re-rank."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from textcrafter_rag.errors import TextcrafterError
from textcrafter_rag.sealing import SealError, generate_key
from textcrafter_rag.two_stage import (
    TwoStage,
    TwoStageSearch,
    noise_to_norm,
    pack_vector,
    random_directions,
    rerank,
    unpack_vector,
)

KEY = generate_key()


def _unit(n: int, d: int = 64, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _two_stage(key: str = KEY, *, context: str = "", **options: float) -> TwoStage:
    return TwoStage(key, context=context, search=TwoStageSearch(**options))


def test_options_are_validated_once_with_the_package_error():
    assert TwoStageSearch.of(None) is None
    assert TwoStageSearch.of(50) == TwoStageSearch(fetch_k=50)
    for bad in (
        {"fetch_k": 0},
        {"fetch_k": 2.5},
        {"fetch_k": True},
        {"doc_strength": -1.0},
        {"query_strength": np.nan},
    ):
        with pytest.raises(TextcrafterError):
            TwoStageSearch(**bad)
    with pytest.raises(ValueError):  # what callers catch
        TwoStageSearch(fetch_k=-3)


def test_noise_has_the_exact_strength_and_keeps_the_norm():
    x = _unit(200) * 3.0  # an encoder that does not normalise
    u = random_directions(200, 64, np.random.default_rng(1))
    y = noise_to_norm(x, u, 1.5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 3.0, rtol=1e-5)
    # before rescaling the point is x + 1.5 ||x|| u: its angle to x is atan(1.5 sin t / (1 + 1.5 cos t))
    cos_xu = np.sum(x / 3.0 * u, axis=1)
    expected = (1 + 1.5 * cos_xu) / np.sqrt(1 + 2 * 1.5 * cos_xu + 1.5**2)
    np.testing.assert_allclose(np.sum(x / 3.0 * y / 3.0, axis=1), expected, atol=1e-5)


def test_the_same_record_is_released_identically_and_others_independently():
    x = _unit(4)
    ts = _two_stage(doc_strength=2.0)
    ids, texts = ["a", "b", "c", "d"], ["one", "two", "three", "four"]
    first = ts.protect_documents(x, record_ids=ids, texts=texts)
    again = _two_stage(doc_strength=2.0).protect_documents(x, record_ids=ids, texts=texts)
    np.testing.assert_array_equal(first, again)  # re-indexing hands the store no fresh draw to average
    other_text = ts.protect_documents(x[:1], record_ids=["a"], texts=["one!"])
    other_key = _two_stage(generate_key(), doc_strength=2.0).protect_documents(x[:1], record_ids=["a"], texts=["one"])
    other_tenant = _two_stage(context="t2", doc_strength=2.0).protect_documents(x[:1], record_ids=["a"], texts=["one"])
    for y in (other_text, other_key, other_tenant):
        assert abs(float(np.dot(y[0] - x[0], first[0] - x[0]))) < 0.9 * float(np.dot(first[0] - x[0], first[0] - x[0]))


def test_queries_are_noised_deterministically_and_zero_strength_sends_the_clean_query():
    q = _unit(1)[0]
    ts = _two_stage(query_strength=1.0)
    a, b = ts.protect_query(q, text="who"), ts.protect_query(q, text="who")
    np.testing.assert_array_equal(a, b)
    assert float(a[0] @ q) < 0.9
    assert not np.array_equal(ts.protect_query(q), a)  # a vector query is keyed by its bytes
    np.testing.assert_array_equal(_two_stage(query_strength=0.0).protect_query(q, text="who")[0], q)


def test_pack_round_trip_is_float16():
    v = _unit(1, 384)[0]
    text = pack_vector(v)
    np.testing.assert_array_equal(unpack_vector(text), v.astype(np.float16).astype(np.float32))
    for bad in (None, "", "f16:", "f16:@@", "x" + text):
        with pytest.raises(SealError):
            unpack_vector(bad)


def test_rerank_orders_by_exact_cosine():
    x = _unit(50)
    order, scores = rerank(x[7] * 5, x, 3)
    assert order[0] == 7 and scores[0] == pytest.approx(1.0)
    assert list(scores) == sorted(scores, reverse=True)


def test_rank_opens_bound_vectors_and_refuses_moved_or_missing_ones():
    x = _unit(20)
    ts = _two_stage()
    ids = [f"r{i}" for i in range(20)]
    tokens = [ts.seal_vector(v, record_id=r) for v, r in zip(x, ids)]
    ranked = ts.rank(x[3], tokens, ids, 5)
    assert ranked[0][0] == 3 and ranked[0][1] == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(SealError):  # a vector moved to another record
        ts.rank(x[3], [tokens[1], tokens[0]], ids[:2], 1)
    with pytest.raises(SealError, match="no sealed vector"):
        ts.rank(x[3], [None], ids[:1], 1)
    with pytest.raises(SealError):  # another key
        _two_stage(generate_key()).rank(x[3], tokens[:1], ids[:1], 1)


def test_key_material_is_not_picklable_nor_in_the_repr():
    ts = _two_stage()
    with pytest.raises(TypeError):
        pickle.dumps(ts)
    assert KEY not in repr(ts)
