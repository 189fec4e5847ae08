from __future__ import annotations

import numpy as np
import pytest
import torch
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag.textcrafter import TextCrafter


def _adversarial_batch(dim: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    rows = [
        rng.standard_normal(dim),
        np.full(dim, 1e-6),  # tiny
        np.full(dim, 1e6),  # huge
        np.eye(dim)[0],  # basis vector
        -np.eye(dim)[dim - 1] * 3,
        rng.standard_normal(dim) * 1e-30,  # subnormal scale
    ]
    return np.asarray(rows, dtype=np.float32)


def _check_release(tc: TextCrafter, x: np.ndarray, f_adv: np.ndarray, v: np.ndarray) -> None:
    diff = f_adv.astype(np.float64) - x.astype(np.float64)
    norms = np.linalg.norm(diff, axis=1)
    # float32 storage of f_adv = f0 + delta limits precision to ~1e-7 * max(|f0|, eps)
    scale = np.maximum(np.abs(x).max(axis=1), tc.eps)
    assert np.all(np.abs(norms - tc.eps) <= 1e-5 * tc.eps + 4e-7 * scale * np.sqrt(x.shape[1]))
    well_scaled = np.abs(x).max(axis=1) < 1e3
    np.testing.assert_allclose(norms[well_scaled], tc.eps, rtol=1e-5)
    assert np.all(np.abs(np.sum(diff * v, axis=1)) <= 1e-5 * tc.eps + 4e-7 * scale * np.sqrt(x.shape[1]))


@pytest.mark.parametrize("eps", [0.01, 1.0, 2.5, 10.0])
def test_release_has_exact_norm_and_is_orthogonal_to_v(eps: float, unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter(eps=eps)
    x = np.concatenate([unit_vectors, _adversarial_batch(32)])
    for z in (np.random.default_rng(1).standard_normal(x.shape), np.zeros(x.shape)):
        f_adv, v = tc.release_with_noise(x, z)
        _check_release(tc, x, f_adv, v)


def test_delta_zero_and_delta_parallel_to_v_use_the_fallback(unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter()
    with torch.no_grad():
        tc.policy.mean_branch.head.weight.zero_()
        tc.policy.mean_branch.head.bias.zero_()
    x = unit_vectors[:8]
    out = tc.policy_outputs(x)
    sigma = out.sigma
    # delta = mu + sigma*z = 0  and  delta = 5 v
    for delta in (np.zeros_like(x), 5.0 * out.v):
        z = (delta - out.mu) / sigma
        f_adv, v = tc.release_with_noise(x, z)
        assert np.isfinite(f_adv).all()
        _check_release(tc, x, f_adv, v)


def test_protect_uses_fresh_noise_and_is_seed_reproducible(unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter(seed=3)
    a, b = tc.protect(unit_vectors), tc.protect(unit_vectors)
    assert not np.allclose(a, b)
    c = make_textcrafter(seed=3).protect(unit_vectors)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_allclose(np.linalg.norm(a - unit_vectors, axis=1), 2.5, rtol=1e-5)


def test_released_direction_stays_random_even_with_a_huge_mean(unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter()
    with torch.no_grad():
        tc.policy.mean_branch.head.bias.fill_(100.0)
        tc.policy.log_sigma.fill_(-20.0)  # try sigma -> 0 (clamped at min_log_sigma)
    x = np.repeat(unit_vectors[:1], 200, axis=0)
    d = tc.protect(x) - x
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    mean_cos = float((d @ d.T)[np.triu_indices(200, 1)].mean())
    assert mean_cos < 0.75  # not a deterministic direction


def test_refinement_keeps_guarantees_and_does_not_change_the_policy(unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter(refine_steps=3)
    before = {k: v.clone() for k, v in tc.policy.state_dict().items()}
    out = tc.protect(unit_vectors)
    np.testing.assert_allclose(np.linalg.norm(out - unit_vectors, axis=1), 2.5, rtol=1e-5)
    for k, v in tc.policy.state_dict().items():
        assert torch.equal(v, before[k])


def test_save_load_round_trip_is_exact(tmp_path, unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter()
    tc.save(tmp_path / "p")
    loaded = TextCrafter.load(tmp_path / "p", seed=11)
    for name, value in tc.policy.state_dict().items():  # the weights come back bit for bit
        np.testing.assert_array_equal(loaded.policy.state_dict()[name].numpy(), value.numpy())
    first = TextCrafter.load(tmp_path / "p", seed=11).protect(unit_vectors)
    np.testing.assert_array_equal(TextCrafter.load(tmp_path / "p", seed=11).protect(unit_vectors), first)
    ref = make_textcrafter()
    ref._noise = type(loaded._noise)(11)
    # A loaded policy folds its first sub-layers into one matrix: the same releases, to float32 rounding.
    np.testing.assert_allclose(first, ref.protect(unit_vectors), rtol=0, atol=1e-6)
    assert loaded.eps == tc.eps and loaded.dim == 32
    assert loaded.spec() == f"textcrafter:{tmp_path / 'p'}"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "2.5"])
def test_invalid_eps_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        make_textcrafter(eps=bad)


def test_bad_inputs_are_refused(tiny_textcrafter: TextCrafter) -> None:
    x = np.ones((2, 32), dtype=np.float32)
    cases = [
        (np.ones((2, 31), dtype=np.float32), ValueError, "dimension 31"),
        (np.ones(32, dtype=np.float32), ValueError, "2-D"),
        (np.ones((0, 32), dtype=np.float32), ValueError, "empty"),
        (np.where(np.eye(2, 32) > 0, np.nan, x), ValueError, "NaN"),
        (np.where(np.eye(2, 32) > 0, np.inf, x), ValueError, "NaN or Inf"),
        (np.zeros((2, 32), dtype=np.float32), ValueError, "all-zero"),
        (np.ones((2, 32), dtype=np.int64), TypeError, "floating-point"),
        (np.ones((2, 32), dtype=bool), TypeError, "floating-point"),
        ("not an array", TypeError, "string"),
        ([[1.0, 2.0], [3.0]], TypeError, "ragged"),
        (np.full((1, 32), 1e300), ValueError, "overflows"),
    ]
    for value, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            tiny_textcrafter.protect(value)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_dtypes_are_accepted(dtype, tiny_textcrafter: TextCrafter, unit_vectors: np.ndarray) -> None:
    out = tiny_textcrafter.protect(unit_vectors.astype(dtype))
    assert out.dtype == np.float32
    np.testing.assert_allclose(
        np.linalg.norm(out - unit_vectors.astype(dtype).astype(np.float32), axis=1), 2.5, rtol=1e-5
    )
