"""Spectrum-shaped noise: the water-filling solution, the noise it releases, persistence and specs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _textcrafter_helpers import trigram_encoder
from scipy.optimize import minimize

from textcrafter_rag import from_spec
from textcrafter_rag.errors import ArtifactError, FingerprintMismatch
from textcrafter_rag.mechanisms import SpectralConfig, SpectralNoise, fit_spectral_noise, water_fill
from textcrafter_rag.noise_fitting import fit_spectral_for_encoder
from textcrafter_rag.textcrafter import CalibrationConfig


def _leakage(lam: np.ndarray, v: np.ndarray) -> float:
    return float(0.5 * np.sum(np.log1p(lam / v)))


def _anisotropic(n: int = 4000, dim: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    x = (rng.standard_normal((n, dim)) * np.geomspace(1.0, 0.05, dim)) @ basis.T + 0.3
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_water_fill_matches_a_brute_force_optimiser(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.01, 2.0, 5)
    q = rng.uniform(0.05, 1.5, 5)
    budget = 0.3
    v = water_fill(lam, q, budget)
    # Brute force: SLSQP over log-variances from a uniform start, knowing nothing of the closed form.
    res = minimize(
        lambda w: _leakage(lam, np.exp(w)),
        x0=np.log(np.full(5, budget / q.sum())),
        constraints=[{"type": "eq", "fun": lambda w: float(q @ np.exp(w)) - budget}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success
    assert float(q @ v) == pytest.approx(budget, rel=1e-10)
    assert _leakage(lam, v) <= res.fun + 1e-9  # never worse than the numeric optimum
    np.testing.assert_allclose(v, np.exp(res.x), rtol=2e-3)
    # KKT: lambda_i / (2 v_i (v_i + lambda_i) q_i) is the same multiplier for every direction.
    mu = lam / (2 * v * (v + lam) * q)
    np.testing.assert_allclose(mu, mu[0], rtol=1e-8)


def test_water_fill_limits() -> None:
    lam, q = np.array([1.0, 0.0, 0.5]), np.array([1.0, 1.0, 1.0])
    v = water_fill(lam, q, 0.2)
    assert v[1] == 0.0 and v[0] > 0 and v[2] > 0  # no signal, no noise
    iso = water_fill(np.full(4, 0.25), np.full(4, 0.25), 0.01)  # isotropic: plain Gaussian noise, s^2 = B
    np.testing.assert_allclose(iso, 0.01, rtol=1e-10)
    tiny = water_fill(np.array([1e-30, 1.0]), np.array([1.0, 1e-30]), 1e-3)  # extreme ratios stay finite
    assert np.isfinite(tiny).all() and (tiny > 0).all()
    for bad in [
        {"eigenvalues": [-1.0, 1.0], "query_moments": [1.0, 1.0], "budget": 1.0},
        {"eigenvalues": [1.0, 1.0], "query_moments": [0.0, 1.0], "budget": 1.0},
        {"eigenvalues": [0.0, 0.0], "query_moments": [1.0, 1.0], "budget": 1.0},
        {"eigenvalues": [1.0], "query_moments": [1.0, 1.0], "budget": 1.0},
        {"eigenvalues": [1.0], "query_moments": [1.0], "budget": 0.0},
        {"eigenvalues": [np.nan], "query_moments": [1.0], "budget": 1.0},
    ]:
        with pytest.raises(ValueError):
            water_fill(**bad)


def test_noise_covariance_matches_u_diag_s2_ut() -> None:
    mech = fit_spectral_noise(_anisotropic(), config=SpectralConfig(budget=0.02))
    mech = mech.with_strength(0.02, seed=3)
    n = 60_000
    x = np.tile(_anisotropic(n=1, seed=9), (n, 1))
    noise = (mech.protect(x) - x).astype(np.float64)
    cov = mech.covariance()
    emp = noise.T @ noise / n  # the mean is zero by construction
    se = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / n)  # std error of each entry
    assert np.all(np.abs(emp - cov) <= 5 * se + 1e-9)
    assert np.all(np.abs(noise.mean(axis=0)) <= 5 * np.sqrt(np.diag(cov) / n))
    # The damage is the query-averaged score variance: E[(y . n)^2] over calibration "queries".
    y = _anisotropic()
    damage = np.mean(np.einsum("ij,jk,ik->i", y, cov, y))
    assert damage == pytest.approx(0.02, rel=1e-6)


def test_strength_is_monotone_and_refits_nothing() -> None:
    base = fit_spectral_noise(_anisotropic())
    budgets = [1e-4, 1e-3, 1e-2, 1e-1]
    mechs = [base.with_strength(b) for b in budgets]
    for a, b in itertools.pairwise(mechs):
        assert np.all(b.variances >= a.variances) and b.expected_norm(6) > a.expected_norm(6)
        assert b.leakage_bound() < a.leakage_bound()
    for m, b in zip(mechs, budgets):
        assert m.eigenvectors is base.eigenvectors  # the fitted spectrum is shared, not recomputed
        assert float(m.query_moments @ m.variances) == pytest.approx(b, rel=1e-9)
        assert m.params() == {"budget": b}


def test_shaped_noise_leaks_less_than_isotropic_noise_at_equal_damage() -> None:
    mech = fit_spectral_noise(_anisotropic(), config=SpectralConfig(budget=0.01))
    iso = np.full(mech.dim, 0.01 / mech.query_moments.sum())  # isotropic variance with the same damage
    assert mech.leakage_bound() < _leakage(mech.eigenvalues, iso) - 0.1


def test_separate_queries_shape_the_noise() -> None:
    docs, queries = _anisotropic(seed=0), _anisotropic(seed=1)
    a = fit_spectral_noise(docs, config=SpectralConfig(budget=0.01))
    b = fit_spectral_noise(docs, queries=queries, config=SpectralConfig(budget=0.01))
    assert np.array_equal(a.eigenvectors, b.eigenvectors)
    assert not np.allclose(a.variances, b.variances)
    assert b.metadata["n_queries"] == queries.shape[0] and a.metadata["n_queries"] is None


def test_save_load_round_trip_is_bit_exact(tmp_path, unit_vectors: np.ndarray) -> None:
    mech = fit_spectral_noise(unit_vectors, config=SpectralConfig(budget=0.005), metadata={"note": "x"})
    path = mech.save(tmp_path / "spectral")
    loaded = SpectralNoise.load(path, seed=1)
    for attr in ("eigenvalues", "eigenvectors", "query_moments", "variances"):
        assert np.array_equal(getattr(mech, attr), getattr(loaded, attr)), attr
    assert loaded.budget == 0.005 and loaded.metadata["note"] == "x"
    assert np.array_equal(mech.with_strength(0.005, seed=1).protect(unit_vectors), loaded.protect(unit_vectors))
    assert SpectralNoise.load(path, budget=0.05).budget == 0.05
    # from_spec: the saved budget, or the one the spec names; spec() names the directory.
    assert from_spec(f"spectral:{path}").budget == 0.005
    again = from_spec(f"spectral:{path},budget=0.02", seed=0)
    assert isinstance(again, SpectralNoise) and again.budget == 0.02
    assert from_spec(again.spec()).budget == 0.02
    out = again.protect(unit_vectors)
    assert out.dtype == np.float32 and out.shape == unit_vectors.shape


def test_bad_input_and_artifacts(tmp_path, unit_vectors: np.ndarray) -> None:
    mech = fit_spectral_noise(unit_vectors, config=SpectralConfig(budget=0.01))
    with pytest.raises(ValueError):
        mech.protect(unit_vectors[:, :16])
    with pytest.raises(TypeError):
        fit_spectral_noise(np.ones((4, 3), dtype=np.int64))
    with pytest.raises(ValueError):
        fit_spectral_noise(unit_vectors, queries=unit_vectors[:, :8])
    for cfg in [{"budget": 0.0}, {"budget": float("inf")}, {"q_floor": 0.0}, {"q_floor": 1.0}]:
        with pytest.raises(ValueError):
            SpectralConfig(**cfg)
    with pytest.raises(ValueError):
        mech.with_strength(-1.0)
    with pytest.raises(ValueError):  # not orthonormal
        SpectralNoise(eigenvalues=np.ones(2), eigenvectors=np.ones((2, 2)), query_moments=np.ones(2), budget=1.0)
    with pytest.raises(ValueError):
        SpectralNoise(
            eigenvalues=np.ones(2),
            eigenvectors=np.eye(2),
            query_moments=np.ones(2),
            budget=1.0,
            secure_mode=True,
            seed=1,
        )
    secure = mech.with_strength(0.01, secure_mode=True)
    assert secure._noise.secure and not np.array_equal(secure.protect(unit_vectors), secure.protect(unit_vectors))
    assert secure.with_strength(0.02)._noise.secure  # a new strength keeps the CSPRNG
    assert not secure.with_strength(0.02, secure_mode=False)._noise.secure
    for spec in ["spectral", "spectral:budget=0.1", f"spectral:{tmp_path},eps=1", f"spectral:{tmp_path},budget=x"]:
        with pytest.raises(ValueError):
            from_spec(spec)
    with pytest.raises(ArtifactError):
        SpectralNoise.load(tmp_path / "missing")
    path = mech.save(tmp_path / "m")
    (path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes()[:-8])
    with pytest.raises(ArtifactError):  # truncated weights
        SpectralNoise.load(path)


def test_fit_for_an_encoder_records_its_fingerprint(tmp_path) -> None:
    corpus = tuple(f"Plain sentence number {i} about the weather and markets." for i in range(60))
    mech = fit_spectral_for_encoder(
        trigram_encoder(24), calibration=CalibrationConfig(corpus=corpus, n_calibration=50), progress=False
    )
    assert mech.dim == 24 and mech.metadata["provenance"]["n_calibration"] == 50
    path = mech.save(tmp_path / "fitted")
    assert SpectralNoise.load(path, encoder=trigram_encoder(24)).dim == 24

    def other(texts: list[str]) -> np.ndarray:
        return np.roll(trigram_encoder(24)(texts), 5, axis=1)  # same dimension, another embedding space

    with pytest.raises(FingerprintMismatch):
        SpectralNoise.load(path, encoder=other)
