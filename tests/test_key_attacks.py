"""Attacks on keyed releases: what recovers a secret permutation or rotation, and what does not.

Synthetic data with fixed seeds, sized so every claim holds with a wide margin (the measured values
are in the comments); each test would fail if the attack, or the reason it fails, changed.
"""

from __future__ import annotations

import numpy as np
import pytest

from textcrafter_rag.attacks.key_recovery import KeyRecovery, recovery_report
from textcrafter_rag.attacks.keys import (
    align_permutation,
    align_rotation,
    least_squares_from_pairs,
    permutation_from_pairs,
    permutation_to_matrix,
    procrustes_from_pairs,
    unkey,
)
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.keyed import Whitening, haar_from_subkey


def _haar(d: int, tag: int) -> np.ndarray:
    return haar_from_subkey(bytes([tag]) * 32, d)


def _gaussian(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def _skewed_anisotropic(n: int, d: int, seed: int) -> np.ndarray:
    """Independent skewed latents with a well-separated spectrum (variance ratio 1.35), mixed and shifted.

    A stand-in for an encoder's embeddings: one fixed mixing and mean, fresh samples per seed. The
    latents' shapes differ (skewness 1.6 to 0.8), as independent components of real embeddings do.
    """
    shape = np.linspace(1.5, 6.0, d)
    rng = np.random.default_rng(seed)
    z = (rng.gamma(shape, 1.0, size=(n, d)) - shape) / np.sqrt(shape) * 1.35 ** (-np.arange(d) / 2.0)
    mean = np.random.default_rng(99).standard_normal(d) * 0.3
    return z @ _haar(d, 200).T + mean


def _same_marginals(n: int, d: int, seed: int, graph: int) -> np.ndarray:
    """Every coordinate standard normal; only the correlation graph (``graph`` picks it) tells them apart."""
    r = np.random.default_rng(graph)
    mix = r.standard_normal((d, d)) * (r.random((d, d)) < 0.3) + np.eye(d)
    mix /= np.linalg.norm(mix, axis=1, keepdims=True)
    return np.random.default_rng(seed).standard_normal((n, d)) @ mix.T


def _distinct_marginals(n: int, d: int, seed: int, domain: int) -> np.ndarray:
    """Coordinates with distinct skew, scale and shift (``domain`` picks them), lightly correlated."""
    r = np.random.default_rng(domain)
    shape, scale, shift = r.uniform(0.5, 8.0, d), r.uniform(0.2, 2.0, d), r.normal(0.0, 1.0, d)
    mix = np.eye(d) + 0.4 * r.standard_normal((d, d)) * (r.random((d, d)) < 0.2)
    z = (np.random.default_rng(seed).gamma(shape, 1.0, size=(n, d)) - shape) / np.sqrt(shape) * scale + shift
    return z @ mix.T


# --- known pairs ---------------------------------------------------------------------------------


def test_procrustes_recovers_a_rotation_exactly_from_d_noiseless_pairs() -> None:
    d = 32
    q = _haar(d, 1)
    clean = _gaussian(d, d, 0)
    q_hat = procrustes_from_pairs(clean, clean @ q.T)
    np.testing.assert_allclose(q_hat, q, atol=1e-5)  # inputs are validated as float32, like stored vectors
    report = recovery_report(q, q_hat, _gaussian(100, d, 1))
    assert report.mean_cosine > 1 - 1e-9 and report.relative_frobenius < 1e-5


def test_procrustes_from_few_pairs_only_knows_their_span() -> None:
    d, k = 64, 4
    q = _haar(d, 1)
    clean = _gaussian(k, d, 0)
    report = recovery_report(q, procrustes_from_pairs(clean, clean @ q.T), _gaussian(500, d, 1))
    assert report.mean_cosine < 0.3  # measured 0.065: about k / d, the share of the known span
    assert report.relative_frobenius > 1.0


def test_procrustes_tolerates_noise_on_the_stored_side() -> None:
    d = 32
    q = _haar(d, 1)
    clean = _gaussian(400, d, 0)
    noisy = clean @ q.T + 0.3 * _gaussian(400, d, 2)  # noise norm ~0.3 of the signal
    report = recovery_report(q, procrustes_from_pairs(clean, noisy), _gaussian(200, d, 1))
    assert report.mean_cosine > 0.99


def test_least_squares_is_exact_from_enough_pairs_and_partial_from_few() -> None:
    d = 24
    w = _haar(d, 3) @ np.diag(np.linspace(0.5, 2.0, d))  # a key that is not orthogonal
    clean = _gaussian(60, d, 0)
    np.testing.assert_allclose(least_squares_from_pairs(clean, clean @ w.T), w, atol=1e-5)
    few = least_squares_from_pairs(clean[:6], clean[:6] @ w.T)
    assert np.linalg.norm(few - w) / np.linalg.norm(w) > 0.5
    with pytest.raises(ValueError, match="same shape"):
        least_squares_from_pairs(clean[:6], clean[:5] @ w.T)


def test_permutation_from_50_pairs_undoes_an_ironcore_style_shuffle() -> None:
    d, k = 64, 50
    perm = np.random.default_rng(5).permutation(d)
    clean = _skewed_anisotropic(k, d, 0)
    stored = 1.7 * clean[:, perm] + 0.01 * _gaussian(k, d, 1)  # s * shuffle(x) + noise
    assert np.array_equal(permutation_from_pairs(clean, stored), perm)
    # Two pairs give every coordinate a correlation of +-1, so they cannot tell coordinates apart. (Three
    # noiseless pairs already recover 58% of them: the centred triple of values is a fingerprint.)
    assert np.mean(permutation_from_pairs(clean[:2], stored[:2]) == perm) < 0.2
    report = recovery_report(perm, permutation_from_pairs(clean, stored), _skewed_anisotropic(100, d, 2))
    assert report.permutation_recovered == 1.0 and report.mean_cosine == pytest.approx(1.0)


# --- zero known pairs: permutations ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["distinct marginals", "same marginals"])
def test_align_permutation_recovers_a_shuffle_from_same_distribution_public_data(kind: str) -> None:
    d = 20
    perm = np.random.default_rng(5).permutation(d)
    make = _distinct_marginals if kind == "distinct marginals" else _same_marginals
    stored = 1.3 * make(500, d, 10, 0)[:, perm]
    assert np.array_equal(align_permutation(stored, make(2000, d, 11, 0)), perm)


def test_align_permutation_needs_the_correlation_graph_when_marginals_agree() -> None:
    d = 20
    perm = np.random.default_rng(5).permutation(d)
    stored = _same_marginals(500, d, 10, 0)[:, perm]
    public = _same_marginals(2000, d, 11, 0)
    marginals_only = align_permutation(stored, public, n_iter=0, n_spectral=0, n_profile=0)
    assert np.mean(marginals_only == perm) < 0.3  # identical N(0, 1) coordinates: chance level
    assert np.array_equal(align_permutation(stored, public), perm)


@pytest.mark.parametrize("kind", ["distinct marginals", "same marginals"])
def test_align_permutation_fails_with_public_data_from_another_distribution(kind: str) -> None:
    d = 20
    perm = np.random.default_rng(5).permutation(d)
    make = _distinct_marginals if kind == "distinct marginals" else _same_marginals
    stored = make(500, d, 10, 0)[:, perm]
    # Chance is 1 fixed point in 20 (Poisson(1): 7 or more has probability 1e-4); measured 1 and 4.
    assert np.mean(align_permutation(stored, make(2000, d, 11, 1)) == perm) < 0.35


# --- zero known pairs: rotations ---------------------------------------------------------------------


def test_align_rotation_recovers_a_rotation_of_anisotropic_skewed_data() -> None:
    """Second moments give the axes, the mean and skewness their signs: the key is nearly recovered."""
    d = 16
    q = _haar(d, 7)
    clean = _skewed_anisotropic(2000, d, 0)
    q_hat = align_rotation(clean @ q.T, _skewed_anisotropic(20000, d, 1), n_iter=0)
    report = recovery_report(q, q_hat, clean)
    assert report.mean_cosine > 0.98 and report.centered_cosine > 0.98  # measured 0.994 / 0.991
    assert report.relative_frobenius < 0.35  # measured 0.12 (2,000 stored vectors limit the tail axes)
    np.testing.assert_allclose(q_hat @ q_hat.T, np.eye(d), atol=1e-10)


def test_align_rotation_cannot_recover_a_rotation_of_isotropic_gaussian_data() -> None:
    """A rotated isotropic Gaussian has exactly the same distribution: no method can find the key."""
    d = 32
    q = _haar(d, 7)
    clean = _gaussian(2000, d, 0)
    report = recovery_report(q, align_rotation(clean @ q.T, _gaussian(20000, d, 1), n_iter=0), clean)
    # The estimate is a random rotation: mean cosine tr(R)/d has standard deviation ~1/d = 0.03.
    assert abs(report.mean_cosine) < 0.25 and report.relative_frobenius > 1.2  # measured 0.005 / 1.41


def _sources(n: int, d: int, seed: int) -> np.ndarray:
    """Independent gamma latents of clearly different shapes (skewness 4 down to 1), mixed and shifted."""
    shape = np.geomspace(0.25, 4.0, d)
    z = (np.random.default_rng(seed).gamma(shape, 1.0, size=(n, d)) - shape) / np.sqrt(shape)
    return (z * 1.35 ** (-np.arange(d) / 2.0)) @ _haar(d, 200).T + np.random.default_rng(99).standard_normal(d) * 0.3


def test_whitening_defeats_the_eigen_start_but_not_independent_components() -> None:
    """Whitening before rotating leaves no second-moment handle; higher moments (ICA) still find the key."""
    d = 8
    q = _haar(d, 7)
    whitening = Whitening.fit(_sources(20000, d, 2), shrinkage=0.0)  # the attacker can fit the same one
    clean, public = whitening.apply(_sources(2000, d, 0)), whitening.apply(_sources(5000, d, 1))
    eigen = recovery_report(q, align_rotation(clean @ q.T, public, init="eigen", n_iter=0), clean)
    ica = recovery_report(q, align_rotation(clean @ q.T, public, init="ica", n_iter=0), clean)
    assert eigen.mean_cosine < 0.6  # measured 0.23: a random rotation (tr(R)/8 has std ~1/8)
    assert ica.mean_cosine > 0.95 and ica.relative_frobenius < 0.3  # measured 0.996 / 0.08


def test_the_ica_start_runs_fastica_to_the_cap_it_is_given() -> None:
    from sklearn.exceptions import ConvergenceWarning

    d = 8
    q = _haar(d, 7)
    whitening = Whitening.fit(_sources(20000, d, 2), shrinkage=0.0)
    clean, public = whitening.apply(_sources(2000, d, 0)), whitening.apply(_sources(5000, d, 1))
    with pytest.warns(ConvergenceWarning):  # one iteration is short of FastICA's tolerance
        capped = align_rotation(clean @ q.T, public, init="ica", ica_max_iter=1, n_iter=0)
    full = align_rotation(clean @ q.T, public, init="ica", n_iter=0)
    assert not np.allclose(capped, full)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InvalidInputError, match="ica_max_iter"):
            align_rotation(clean @ q.T, public, init="ica", ica_max_iter=bad)


def test_align_rotation_is_deterministic() -> None:
    d = 8
    q = _haar(d, 7)
    stored, public = _skewed_anisotropic(300, d, 0) @ q.T, _skewed_anisotropic(600, d, 1)
    a = align_rotation(stored, public, n_iter=2, max_points=400, seed=3)
    b = align_rotation(stored, public, n_iter=2, max_points=400, seed=3)
    np.testing.assert_array_equal(a, b)


# --- helpers and the report ---------------------------------------------------------------------------


def test_permutation_matrix_and_unkey_follow_the_shuffle_convention() -> None:
    x = _gaussian(5, 6, 0)
    perm = np.array([2, 0, 1, 5, 3, 4])
    p = permutation_to_matrix(perm)
    np.testing.assert_allclose(x @ p.T, x[:, perm])
    np.testing.assert_allclose(unkey(x[:, perm], perm), x, atol=1e-6)
    with pytest.raises(ValueError, match="permutation"):
        permutation_to_matrix(np.array([0, 0, 1]))


def test_recovery_report_scores_partial_permutations_and_unrelated_rotations() -> None:
    d = 10
    perm = np.arange(d)
    two_swapped = perm.copy()
    two_swapped[[0, 1]] = two_swapped[[1, 0]]
    report = recovery_report(perm, two_swapped, _gaussian(50, d, 0))
    assert isinstance(report, KeyRecovery)
    assert report.permutation_recovered == pytest.approx(0.8)
    assert report.relative_frobenius == pytest.approx(np.sqrt(4 / d))
    unrelated = recovery_report(_haar(64, 1), _haar(64, 2), _gaussian(400, 64, 0))
    assert unrelated.permutation_recovered is None
    assert abs(unrelated.mean_cosine) < 0.15 and unrelated.relative_frobenius == pytest.approx(np.sqrt(2), abs=0.1)
    assert set(unrelated.as_dict()) == {"mean_cosine", "centered_cosine", "relative_frobenius", "permutation_recovered"}
