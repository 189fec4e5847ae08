from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from textcrafter_rag import from_spec
from textcrafter_rag.mechanisms import (
    GaussianNoise,
    LDPGaussian,
    NoDefense,
    Purkayastha,
    Shuffle,
    analytic_gaussian_sigma,
)
from textcrafter_rag.mechanisms.ldp import classical_gaussian_sigma, gaussian_delta
from textcrafter_rag.randomness import SeedWarning


def test_identity_and_shuffle(unit_vectors: np.ndarray) -> None:
    assert np.array_equal(NoDefense().protect(unit_vectors), unit_vectors)
    sh = Shuffle(seed=3)
    out = sh.protect(unit_vectors)
    perm = sh.permutation(32)
    assert sorted(perm) == list(range(32)) and not np.array_equal(perm, np.arange(32))
    assert np.array_equal(out, unit_vectors[:, perm])
    assert np.array_equal(sh.protect(unit_vectors), out)  # one secret permutation per instance
    # inner products are preserved when both sides are shuffled
    np.testing.assert_allclose(out @ out.T, unit_vectors @ unit_vectors.T, atol=1e-6)


def test_gaussian_scale_and_equal_norm(unit_vectors: np.ndarray) -> None:
    g = GaussianNoise(s=0.1, seed=0)
    x = np.repeat(unit_vectors, 50, axis=0)
    noise = g.protect(x) - x
    assert abs(noise.std() - 0.1) < 0.005
    assert abs(np.linalg.norm(noise, axis=1).mean() - g.expected_norm(32)) < 0.02
    g2 = GaussianNoise.at_norm(2.5, dim=384, seed=0)
    assert math.isclose(g2.expected_norm(384), 2.5, rel_tol=1e-12)
    assert math.isclose(g2.s * math.sqrt(384), 2.5, rel_tol=2e-3)
    for bad in (0, -1, float("nan"), float("inf"), "0.1"):
        with pytest.raises(ValueError):
            GaussianNoise(s=bad)


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9])
def test_ldp_sigma_below_classical_bound_for_small_eps(eps: float) -> None:
    s = analytic_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=2.0)
    assert s < classical_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=2.0)


@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0, 12.0])
def test_ldp_sigma_is_the_tight_analytic_calibration(eps: float) -> None:
    s = analytic_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=2.0)
    # Closed form of Balle & Wang's Theorem 8, evaluated independently with scipy.stats.
    a, b = 2.0 / (2 * s), eps * s / 2.0
    closed = norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)
    assert closed <= 1e-5 and closed == pytest.approx(1e-5, rel=1e-6)
    assert gaussian_delta(epsilon=eps, sigma=s * 0.99, sensitivity=2.0) > 1e-5  # any smaller sigma fails
    m = LDPGaussian(epsilon=eps, seed=0)
    assert m.sigma == s and m.sensitivity == 2.0


def test_ldp_sigma_scales_with_sensitivity() -> None:
    s1 = analytic_gaussian_sigma(epsilon=4, delta=1e-5, sensitivity=1.0)
    s2 = analytic_gaussian_sigma(epsilon=4, delta=1e-5, sensitivity=2.0)
    assert s2 == pytest.approx(2 * s1, rel=1e-9)


def test_ldp_normalises_then_adds_noise(unit_vectors: np.ndarray) -> None:
    m = LDPGaussian(epsilon=8, seed=1)
    x = np.repeat(unit_vectors * 7.0, 40, axis=0)  # not unit norm: must be normalised first
    noise = m.protect(x) - x / 7.0
    assert abs(noise.std() - m.sigma) < 0.02 * m.sigma
    with pytest.raises(ValueError):
        LDPGaussian(epsilon=0)
    with pytest.raises(ValueError):
        LDPGaussian(epsilon=1, delta=1.5)


def test_purkayastha_unit_outputs_and_angle_law() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 16)).astype(np.float32)
    small, large = Purkayastha(epsilon=1.0, seed=0), Purkayastha(epsilon=200.0, seed=0)
    ys, yl = small.protect(x), large.protect(x)
    np.testing.assert_allclose(np.linalg.norm(ys, axis=1), 1.0, atol=1e-5)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    ang_s = np.arccos(np.clip(np.sum(ys * u, 1), -1, 1))
    ang_l = np.arccos(np.clip(np.sum(yl * u, 1), -1, 1))
    assert ang_l.mean() < ang_s.mean()  # more budget, closer to the input
    # Empirical angle distribution matches the analytic CDF (Kolmogorov-Smirnov distance).
    t, cdf = small.angle_cdf(16)
    emp = np.searchsorted(np.sort(ang_s), t, side="right") / len(ang_s)
    assert np.abs(emp - cdf).max() < 0.04
    assert small.expected_norm(16) == pytest.approx(np.linalg.norm(ys - u, axis=1).mean(), rel=0.03)


def test_purkayastha_density_ratio_bounded_by_epsilon() -> None:
    m = Purkayastha(epsilon=3.0)
    # log p(y|x) - log p(y|x') = -kappa (angle(x,y) - angle(x',y)) and angles lie in [0, pi]
    assert m.kappa * math.pi == pytest.approx(3.0)


def test_specs_round_trip() -> None:
    for spec in ["none", "shuffle", "gaussian:s=0.01", "ldp:eps=4", "ldp:eps=4,delta=1e-06", "purkayastha:eps=8"]:
        m = from_spec(spec, seed=0)
        assert type(from_spec(m.spec(), seed=0)) is type(m)
    assert from_spec("gaussian:s=0.05").s == 0.05
    assert from_spec("ldp:eps=4").epsilon == 4.0
    for bad in ["", "laplace:b=1", "gaussian:s", "gaussian:s=abc", "gaussian:sigma=1"]:
        with pytest.raises(ValueError):
            from_spec(bad)


def test_secure_mode_and_seed_behaviour(unit_vectors: np.ndarray) -> None:
    a = GaussianNoise(s=0.1, secure_mode=True)
    b = GaussianNoise(s=0.1, secure_mode=True)
    assert a._noise.secure
    assert not np.array_equal(a.protect(unit_vectors), b.protect(unit_vectors))
    assert not np.array_equal(a.protect(unit_vectors), a.protect(unit_vectors))  # fresh noise per call
    z = a._noise.normal((200000,))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    with pytest.raises(ValueError):
        GaussianNoise(s=0.1, secure_mode=True, seed=1)
    with pytest.warns(SeedWarning):
        GaussianNoise(s=0.1, seed=1)
    s1, s2 = GaussianNoise(s=0.1, seed=5), GaussianNoise(s=0.1, seed=5)
    assert np.array_equal(s1.protect(unit_vectors), s2.protect(unit_vectors))


@pytest.mark.parametrize("spec", ["shuffle", "gaussian:s=0.001", "ldp:eps=12", "purkayastha:eps=12"])
def test_no_row_is_released_unchanged(spec: str, unit_vectors: np.ndarray) -> None:
    out = from_spec(spec, seed=0).protect(unit_vectors)
    assert out.dtype == np.float32 and out.shape == unit_vectors.shape and np.isfinite(out).all()
    assert not np.any(np.all(out == unit_vectors, axis=1))


@pytest.mark.parametrize("scale", [1e-38, 1e-20, 1e20, 3e38])
def test_sphere_mechanisms_handle_extreme_scales(scale: float) -> None:
    x = np.full((2, 16), scale, dtype=np.float32)
    x[1, 0] = -scale
    for mech in (LDPGaussian(epsilon=8, seed=0), Purkayastha(epsilon=8, seed=0)):
        out = mech.protect(x)
        assert np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(Purkayastha(epsilon=8, seed=0).protect(x), axis=1), 1.0, atol=1e-5)
