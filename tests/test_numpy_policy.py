"""Protection runs in NumPy: the same releases as the torch policy, and SciPy's special functions without SciPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from textcrafter_rag.artifacts import load_artifact
from textcrafter_rag.mechanisms import LDPGaussian, Purkayastha, analytic_gaussian_sigma
from textcrafter_rag.mechanisms.special import brentq, log_ndtr, logsumexp, ndtr
from textcrafter_rag.numerics import plain_torch
from textcrafter_rag.policies import BUNDLED_MODEL_ID, SHIPPED, shipped_policy_path
from textcrafter_rag.textcrafter import PolicyConfig, TextCrafter, TextCrafterPolicy
from textcrafter_rag.textcrafter.numpy_policy import erf
from textcrafter_rag.textcrafter.projection import release as torch_release

N = 10_000


def _torch_release(path, x: np.ndarray, z: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """The torch path as it was: the policy module built from the saved tensors, the torch projection."""
    config, tensors = load_artifact(path, kind="textcrafter-policy")
    policy = TextCrafterPolicy(PolicyConfig(**config["policy"])).float().eval()
    policy.load_state_dict({k[len("policy.") :]: v for k, v in tensors.items() if k.startswith("policy.")})
    with plain_torch():
        f0 = torch.as_tensor(x)
        out = policy(f0)
        f_adv = torch_release(f0, out.mu + out.sigma * torch.as_tensor(z), out.v, radius)
    return f_adv.numpy(), out.v.numpy()


@pytest.mark.parametrize("eps", sorted(SHIPPED[BUNDLED_MODEL_ID]))
def test_the_numpy_policy_releases_what_the_torch_policy_does(eps: float) -> None:
    path = shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = rng.standard_normal(x.shape).astype(np.float32)
    expected, v_expected = _torch_release(path, x, z, eps)

    loaded = TextCrafter.load(path)  # folded weights: what protection runs
    got, v = loaded.release_with_noise(x, z)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(v, v_expected, rtol=0, atol=1e-5)
    norms = np.linalg.norm(got.astype(np.float64) - x, axis=1)
    np.testing.assert_allclose(norms, np.linalg.norm(expected.astype(np.float64) - x, axis=1), rtol=1e-6)
    np.testing.assert_allclose(norms, eps, rtol=1e-5)
    assert np.abs(np.sum((got.astype(np.float64) - x) * v, axis=1)).max() < 1e-5

    loaded.policy  # noqa: B018 -- a torch module over the same weights: protection then reads them unfolded
    unfolded, _ = loaded.release_with_noise(x, z)
    np.testing.assert_allclose(unfolded, expected, rtol=0, atol=1e-5)


def test_extreme_rows_keep_the_guarantee_in_numpy() -> None:
    tc = TextCrafter.load_shipped(seed=0)
    rng = np.random.default_rng(3)
    rows = [np.full(384, 1e-30), np.full(384, 1e6), np.eye(384)[0], rng.standard_normal(384) * 1e-38]
    x = np.asarray(rows, dtype=np.float32)
    for z in (rng.standard_normal(x.shape), np.zeros(x.shape)):
        f_adv = tc.release_with_noise(x, z)[0]
        d = f_adv.astype(np.float64) - x
        scale = np.maximum(np.abs(x).max(axis=1), 1.0)
        assert np.all(np.abs(np.linalg.norm(d, axis=1) - 1.0) <= 1e-5 + 4e-7 * scale * np.sqrt(384))


def test_erf_is_float32_accurate() -> None:
    x = np.linspace(-7.0, 7.0, 200_001).astype(np.float32)
    exact = np.array([math.erf(float(t)) for t in x])
    assert np.abs(erf(x.copy()).astype(np.float64) - exact).max() < 5e-7


def test_special_functions_match_scipy() -> None:
    special = pytest.importorskip("scipy.special")
    optimize = pytest.importorskip("scipy.optimize")
    xs = np.concatenate([np.linspace(-30.0, 30.0, 6001), [-1e3, -40.0, -20.0001, -19.9999, 5.999, 6.001, 40.0]])
    for x in xs:
        assert ndtr(x) == pytest.approx(special.ndtr(x), rel=1e-12, abs=1e-300)
        assert log_ndtr(x) == pytest.approx(special.log_ndtr(x), rel=1e-12)
    a = np.array([-np.inf, -3.0, 0.5, 700.0])
    assert logsumexp(a) == pytest.approx(special.logsumexp(a), rel=1e-15)
    f = lambda t: math.cos(t) - t
    assert brentq(f, 0.0, 1.0, xtol=1e-14) == pytest.approx(optimize.brentq(f, 0.0, 1.0, xtol=1e-14), abs=1e-14)


def test_the_ldp_calibrations_are_unchanged() -> None:
    """Values SciPy's calibration gave before SciPy left the runtime install (same algorithm, same results)."""
    for eps, sigma in [(0.1, 61.499132264017), (1.0, 7.461263269639338), (50.0, 0.29952121512167257)]:
        assert analytic_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=2.0) == pytest.approx(sigma, rel=1e-12)
    assert LDPGaussian(epsilon=4.0, seed=0).sigma == pytest.approx(2.1623236990404777, rel=1e-12)
    t, cdf = Purkayastha(epsilon=8.0, seed=0).angle_cdf(384)
    assert cdf[0] == 0.0 and cdf[-1] == 1.0 and np.all(np.diff(cdf) >= 0) and t.size == 20001
