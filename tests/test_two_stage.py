"""Two-stage search core: keyed candidate noise, sealed clean vectors, exact re-rank."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidTypeError, ProtectionError, TextcrafterError
from textcrafter_rag.keyed import keyed_normals
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.candidates import (
    TwoStage,
    TwoStageSearch,
    noise_to_norm,
    pack_vector,
    random_directions,
    rerank,
    unpack_vector,
)
from textcrafter_rag.sealing import SealError, generate_key

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


def test_noise_to_norm_has_the_exact_strength_and_keeps_the_norm():
    x = _unit(200) * 3.0  # an encoder that does not normalise
    u = random_directions(200, 64, np.random.default_rng(1))
    y = noise_to_norm(x, u, 1.5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 3.0, rtol=1e-5)
    # before rescaling the point is x + 1.5 ||x|| u: its angle to x is atan(1.5 sin t / (1 + 1.5 cos t))
    cos_xu = np.sum(x / 3.0 * u, axis=1)
    expected = (1 + 1.5 * cos_xu) / np.sqrt(1 + 2 * 1.5 * cos_xu + 1.5**2)
    np.testing.assert_allclose(np.sum(x / 3.0 * y / 3.0, axis=1), expected, atol=1e-5)


def _undo(ts: TwoStage, y: np.ndarray) -> np.ndarray:
    return ts.rotation(y.shape[1]).invert(y)


def test_one_vector_is_released_once_whatever_its_copies_and_distinct_vectors_independently():
    x = _unit(4)
    ts = _two_stage(doc_strength=2.0)
    first = ts.protect_documents(x)
    np.testing.assert_array_equal(first, _two_stage(doc_strength=2.0).protect_documents(x))  # re-indexing
    # copies: the same draw; float32 BLAS rounds by the batch's shape on some CPUs (AMD EPYC: 6e-8), far below
    # the noise (norm 2.0), so copies average to nothing
    np.testing.assert_allclose(ts.protect_documents(x[[0, 0, 0]]), first[[0, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(ts.protect_documents(x[:1] * 7.5), first[:1], atol=1e-6)  # scaled: the same draw
    jitter = x[:1] + 1e-7 * _unit(1, seed=9)  # float noise of an encoder: the same quantized direction
    np.testing.assert_allclose(ts.protect_documents(jitter), first[:1], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)  # no norm reaches the store
    other_key = _two_stage(generate_key(), doc_strength=2.0)
    tenant = _two_stage(context="t2", doc_strength=2.0)
    noise = _undo(ts, first) - x
    assert abs(float(noise[0] @ noise[1])) < 0.9 * float(noise[0] @ noise[0])  # distinct vectors: fresh draws
    other = _undo(other_key, other_key.protect_documents(x[:1])) - x[:1]
    assert abs(float(other[0] @ noise[0])) < 0.9 * float(noise[0] @ noise[0])  # another key: another draw
    t2 = tenant.protect_documents(x[:1])
    assert float(t2[0] @ first[0]) < 0.9  # another tenant: another rotation ...
    np.testing.assert_allclose(_undo(tenant, t2), _undo(ts, first[:1]), atol=1e-5)  # ... of the same draw


def test_candidates_are_rotated_by_the_tenant_key():
    x = _unit(300, 64, seed=3)
    ts = _two_stage(doc_strength=0.0)  # no noise: the rotation alone
    y = ts.protect_documents(x)
    np.testing.assert_allclose(y @ y.T, x @ x.T, atol=1e-5)  # inner products kept exactly
    assert abs(float(np.mean(np.sum(x * y, axis=1)))) < 0.1  # but a guess in the encoder's basis does not match


def test_queries_are_noised_by_their_vector_deterministically_and_rotated():
    q = _unit(1)[0]
    ts = _two_stage(query_strength=1.0)
    a, b = ts.protect_query(q), ts.protect_query(q * 3.0)
    np.testing.assert_allclose(a, b, atol=1e-6)  # a case or whitespace variant with the same vector: one draw
    np.testing.assert_array_equal(a, ts.protect_query(q))
    assert float(_undo(ts, a)[0] @ q) < 0.9
    np.testing.assert_allclose(
        _undo(_two_stage(query_strength=0.0), _two_stage(query_strength=0.0).protect_query(q))[0], q, atol=1e-5
    )


def test_vectors_that_would_overflow_or_underflow_or_are_strings_are_refused_by_row():
    x = _unit(3).astype(np.float64)
    ts = _two_stage()
    for scale, row in ((3e38, 1), (1e-44, 2)):
        bad = x.copy()
        bad[row] *= scale
        with pytest.raises(ProtectionError, match=f"first at row {row}"):
            ts.protect_documents(bad)
    secret = "Jane Doe, card 4111 1111 1111 1111"
    for value in ([[secret]], secret, [[1.0, secret]]):
        with pytest.raises(InvalidTypeError) as info:
            ts.protect_documents(value)
        assert "Jane" not in str(info.value)
    with pytest.raises(InvalidTypeError):
        ts.protect_query(secret)


def test_pack_round_trips_int8_by_default_and_float16():
    v = _unit(1, 384)[0]
    text = pack_vector(v)
    assert text.startswith("i8:") and len(text) == len("i8:") + 4 * ((4 + 384 + 2) // 3)
    step = np.abs(v).max() / 127
    np.testing.assert_allclose(unpack_vector(text), v, atol=step / 2 + 1e-7)  # rounding to the nearest step
    assert float(unpack_vector(text) @ v) / float(np.linalg.norm(unpack_vector(text))) > 0.9999
    half = pack_vector(v, dtype="float16")
    np.testing.assert_array_equal(unpack_vector(half), v.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(unpack_vector(pack_vector(np.zeros(4))), np.zeros(4))
    for bad in (None, "", "f16:", "f16:@@", "i8:AAA", "x" + text):
        with pytest.raises(SealError):
            unpack_vector(bad)
    with pytest.raises(TextcrafterError):
        pack_vector(v, dtype="float64")


def test_rerank_orders_by_exact_cosine():
    x = _unit(50)
    order, scores = rerank(x[7] * 5, x, 3)
    assert order[0] == 7 and scores[0] == pytest.approx(1.0)
    assert list(scores) == sorted(scores, reverse=True)


def test_key_material_is_not_picklable_nor_in_the_repr():
    ts = _two_stage()
    with pytest.raises(TypeError):
        pickle.dumps(ts)
    assert KEY not in repr(ts)


def test_candidates_are_bit_identical_to_the_releases_that_wrote_existing_stores() -> None:
    """One vector, one release, across versions too: a record re-added after an upgrade gives the store the very
    vector it already holds, so two versions' candidates cannot be averaged. The earlier releases computed
    ``unit_rows(unit + r * unit_rows(directions))`` over the whole batch; the seeded rebuild must match it bit
    for bit (it once normalised each direction with ``np.linalg.norm`` instead, a last-bit difference)."""
    clean = np.random.default_rng(0).standard_normal((50, 384)).astype(np.float32)
    x = unit_rows(clean.astype(np.float64))  # what the release keys and noises: the unit clean direction
    two = TwoStage(bytes(range(32)), context="t", search=TwoStageSearch())
    seeds = [two._seed(b"document", row) for row in x]  # the same keyed PRF the release uses
    directions = np.stack([keyed_normals(seed, 384, 384) for seed in seeds])
    earlier = unit_rows(x + 2.0 * unit_rows(directions))
    assert np.array_equal(two.noised(x, seeds, 2.0), earlier)
    rotated = two.rotation(384).apply(earlier.astype(np.float32), name="document vectors")
    assert np.array_equal(two.protect_documents(clean), rotated)
