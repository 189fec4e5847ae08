"""Attacks on keyed releases: recover the secret transform, then un-key and invert as usual.

A keyed release stores ``clean @ T.T`` for a secret ``D x D`` matrix ``T`` (a permutation, as in
IronCore Cloaked AI's shuffle, or the Haar rotation of :mod:`textcrafter_rag.keyed`), possibly after
noise. Every function here returns an estimate of ``T`` in that convention, so
``unkey(stored, T_hat)`` is the attacker's estimate of the clean vectors, ready for the inverter.

* Known pairs (the attacker inserted or learned ``k`` documents): :func:`procrustes_from_pairs`,
  :func:`least_squares_from_pairs`, :func:`permutation_from_pairs`.
* Zero known pairs, only the store and the attacker's own embeddings of public text:
  :func:`align_permutation` (marginal statistics, then correlation-structure graph matching) and
  :func:`align_rotation` (covariance eigenbases or independent components, then iterative
  Procrustes on CSLS mutual nearest neighbours, Conneau et al. 2018).
* :mod:`.key_recovery` scores an estimate against the true key.

Everything is deterministic: the only randomness (subsampling) comes from ``seed``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy.optimize import linear_sum_assignment

from ..errors import InvalidInputError
from ..numerics import unit_rows
from ..validation import check_int, check_vectors

__all__ = ["align_permutation", "align_rotation", "least_squares_from_pairs", "permutation_from_pairs"]
__all__ += ["ICA_MAX_ITER", "permutation_to_matrix", "procrustes_from_pairs", "unkey"]

_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
#: FastICA's iteration cap in :func:`align_rotation`'s ``init="ica"`` start (the attack's strength needs it).
ICA_MAX_ITER = 400


def _pairs(clean: Any, stored: Any) -> tuple[np.ndarray, np.ndarray]:
    c = check_vectors(clean, name="clean", allow_zero_rows=True).astype(np.float64)
    s = check_vectors(stored, name="stored", allow_zero_rows=True).astype(np.float64)
    if c.shape != s.shape:
        raise InvalidInputError(f"clean {c.shape} and stored {s.shape} must have the same shape (one row per pair)")
    return c, s


def _polar(m: np.ndarray) -> np.ndarray:
    """The orthogonal matrix nearest to ``m`` (``U V^T`` of its SVD)."""
    u, _, vt = np.linalg.svd(m)
    return u @ vt


def procrustes_from_pairs(clean: Any, stored: Any) -> np.ndarray:
    """Orthogonal Procrustes: the orthogonal ``Q`` minimising ``||clean @ Q.T - stored||_F``.

    Exact from ``k >= D`` noiseless pairs in general position; from ``k < D`` pairs only the span of
    the known clean vectors is pinned down, the rest is arbitrary.
    """
    c, s = _pairs(clean, stored)
    return _polar(s.T @ c)


def least_squares_from_pairs(clean: Any, stored: Any, *, ridge: float | None = None) -> np.ndarray:
    """Unconstrained linear map ``W`` with ``stored ≈ clean @ W.T`` (for a key that is not orthogonal).

    Args:
        clean: ``(k, D)`` the attacker's embeddings of the known texts.
        stored: ``(k, D)`` the matching stored vectors.
        ridge: Ridge penalty relative to the mean eigenvalue of ``clean.T @ clean``. ``None``:
            ``0`` (exact least squares) when ``k >= D``, ``1e-3`` when ``k < D`` (underdetermined).
    """
    c, s = _pairs(clean, stored)
    k, d = c.shape
    lam = (0.0 if k >= d else 1e-3) if ridge is None else float(ridge)
    if not (np.isfinite(lam) and lam >= 0):
        raise InvalidInputError("ridge must be a finite number >= 0")
    gram = c.T @ c
    if lam == 0.0:
        wt = np.linalg.lstsq(c, s, rcond=None)[0]
    else:
        wt = np.linalg.solve(gram + lam * np.trace(gram) / d * np.eye(d), c.T @ s)
    return wt.T


def permutation_to_matrix(perm: Any) -> np.ndarray:
    """The matrix ``P`` with ``x[:, perm] == x @ P.T`` (``P[j, perm[j]] = 1``)."""
    p = np.asarray(perm)
    if p.ndim != 1 or p.dtype.kind not in "iu" or not np.array_equal(np.sort(p), np.arange(p.size)):
        raise InvalidInputError("perm must be a permutation of range(D) as a 1-D integer array")
    m = np.zeros((p.size, p.size))
    m[np.arange(p.size), p] = 1.0
    return m


def _standardise_columns(x: np.ndarray) -> np.ndarray:
    z = x - x.mean(axis=0)
    return z / np.where(z.std(axis=0) > 0, z.std(axis=0), 1.0)


def permutation_from_pairs(clean: Any, stored: Any) -> np.ndarray:
    """Recover a coordinate shuffle ``stored ≈ s * clean[:, perm] + noise`` from ``k`` known pairs.

    Each stored coordinate is matched to the clean coordinate it correlates with best across the
    pairs (Pearson, so a positive scale ``s`` and small noise do not matter), one-to-one by the
    Hungarian algorithm. A few dozen pairs suffice: wrong coordinates correlate at ``~1/sqrt(k)``.

    Returns:
        ``perm`` with ``stored[:, j] ≈ clean[:, perm[j]]``.
    """
    c, s = _pairs(clean, stored)
    corr = _standardise_columns(s).T @ _standardise_columns(c) / c.shape[0]
    rows, cols = linear_sum_assignment(-corr)
    return cols[np.argsort(rows)].astype(np.int64)


def _marginal_features(x: np.ndarray, n_profile: int) -> np.ndarray:
    """Per-dimension features that a permutation carries along unchanged: ``(D, F)``.

    Mean and std relative to the global RMS (invariant to a global scale), skewness, excess
    kurtosis, standardised quantiles, and the sorted absolute correlations with the other
    dimensions (a permutation-invariant summary of the correlation graph).
    """
    x = x / np.sqrt(np.mean(x * x))
    mean, std = x.mean(axis=0), x.std(axis=0)
    z = (x - mean) / np.where(std > 0, std, 1.0)
    skew, kurt = np.mean(z**3, axis=0), np.mean(z**4, axis=0) - 3.0
    quant = np.quantile(z, _QUANTILES, axis=0).T
    corr = np.abs(z.T @ z / x.shape[0])
    np.fill_diagonal(corr, 0.0)
    profile = -np.sort(-corr, axis=1)[:, :n_profile]
    return np.column_stack([mean, std, skew, kurt, quant, profile])


def _feature_distance(fs: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Squared distances between feature rows, each feature in units of its spread across dimensions.

    The spread is floored at 0.1% of the feature's size, so a constant feature's round-off is not amplified.
    """
    scale = np.maximum(fp.std(axis=0), 1e-9 + 1e-3 * np.abs(fp).mean(axis=0))
    return _sq_dist(fs / scale, fp / scale)


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


def _spectral_signature(corr: np.ndarray, m: int) -> np.ndarray:
    """``|V[:, :m]|`` of the top eigenvectors: permuting dimensions permutes rows of ``V`` (signs dropped by abs)."""
    vals, vecs = np.linalg.eigh(corr)
    return np.abs(vecs[:, np.argsort(vals)[::-1][:m]])


def _profile_cost(rs: np.ndarray, rp: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """``[j, i] = sum_k (rs[j, k] - rp[i, perm[k]])**2`` over the ``k`` that do not involve ``j`` or ``i`` themselves.

    Leaving out ``k = j`` and ``k = perm^-1(i)`` matters: those terms compare a correlation with a
    diagonal 1, which rewards the current assignment and would freeze every mistake in place.
    """
    d = rs.shape[0]
    rpp = rp[:, perm]  # rpp[i, k] = rp[i, perm[k]]
    cost = _sq_dist(rs, rpp)
    inv = np.argsort(perm)
    own = (np.diag(rs)[:, None] - rpp.T) ** 2  # k = j: [j, i] = (rs[j, j] - rp[i, perm[j]])**2
    partner = (rs[:, inv] - np.diag(rp)[None, :]) ** 2  # k = inv[i]: [j, i] = (rs[j, inv[i]] - rp[i, i])**2
    partner[inv, np.arange(d)] = 0.0  # where inv[i] == j the two are the same term
    return np.maximum(cost - own - partner, 0.0)


def _normalised(cost: np.ndarray) -> np.ndarray:
    return cost / max(float(np.median(cost)), 1e-12)


def _at_matches(cost: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return cost / max(float(np.median(cost[np.arange(perm.size), perm])), 1e-12)


def _assign(cost: np.ndarray) -> np.ndarray:
    rows, cols = linear_sum_assignment(cost)
    return cols[np.argsort(rows)]


def align_permutation(
    stored: Any,
    public: Any,
    *,
    n_iter: int = 30,
    marginal_weight: float = 1.0,
    n_profile: int = 16,
    n_spectral: int = 32,
) -> np.ndarray:
    """Recover a coordinate shuffle with zero known pairs, from the attacker's own public embeddings.

    1. Match each stored dimension to a public one, one-to-one by the Hungarian algorithm, on
       per-dimension statistics (:func:`_marginal_features`) plus its spectral signature in the
       correlation graph (:func:`_spectral_signature`), which still separates dimensions whose
       marginals are identical.
    2. Graph matching: given the current matching, a stored dimension's correlations with all the
       others must equal its candidate's correlations with their matched partners; re-solve the
       assignment on ``marginal_weight * marginal cost + correlation-profile cost`` until it is stable
       (a linearised quadratic assignment, as in the first step of FAQ). Each cost is measured in
       units of its median over the current matches, so whichever separates dimensions better leads.

    Works when the public text comes from the same domain as the store (the issue's IronCore
    experiment); from another domain the statistics differ and the matching degrades.

    Args:
        stored: ``(n, D)`` stored vectors (``s * clean[:, perm]`` plus small noise).
        public: ``(m, D)`` the attacker's clean embeddings of public text.
        n_iter: Most graph-matching rounds.
        marginal_weight: Weight of the per-dimension cost against the correlation cost.
        n_profile: How many sorted correlations describe a dimension in step 1.
        n_spectral: How many correlation eigenvectors make the spectral signature (0: none).

    Returns:
        ``perm`` with ``stored[:, j] ≈ clean[:, perm[j]]``.
    """
    s = check_vectors(stored, name="stored", allow_zero_rows=True).astype(np.float64)
    p = check_vectors(public, name="public", dim=s.shape[1], allow_zero_rows=True).astype(np.float64)
    d = s.shape[1]
    n_profile = max(0, min(int(n_profile), d - 1))
    fs, fp = _marginal_features(s, n_profile), _marginal_features(p, n_profile)
    marginal = _normalised(_feature_distance(fs, fp))
    rs = _standardise_columns(s)
    rs = rs.T @ rs / s.shape[0]
    rp = _standardise_columns(p)
    rp = rp.T @ rp / p.shape[0]
    cost = marginal_weight * marginal
    m = max(0, min(int(n_spectral), d))
    if m:
        cost = cost + _normalised(_sq_dist(_spectral_signature(rs, m), _spectral_signature(rp, m)))
    perm = _assign(cost)
    for _ in range(max(0, int(n_iter))):
        # Each cost in units of its typical value at the current matches: a cost that cannot tell
        # dimensions apart (identical marginals) then weighs ~1 everywhere and stops overruling the other.
        structural = _profile_cost(rs, rp, perm)
        new = _assign(marginal_weight * _at_matches(marginal, perm) + _at_matches(structural, perm))
        if np.array_equal(new, perm):
            break
        perm = new
    return perm.astype(np.int64)


def _subsample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return x if x.shape[0] <= n else x[np.sort(rng.choice(x.shape[0], n, replace=False))]


def _eigen_init(s: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``Vs diag(signs) Vp^T`` from the covariance eigenbases, each sign from mean and skewness.

    A rotation maps the clean eigenvectors onto the stored ones up to sign (and up to mixing
    within near-equal eigenvalues, left to the refinement). The sign of eigenvector ``k`` is the
    one that makes the projections agree in mean and in third moment, each weighted by its
    z-score, so a direction with no mean shift falls back on skewness.
    """

    def basis(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mu = x.mean(axis=0)
        vals, vecs = np.linalg.eigh(np.cov(x, rowvar=False))
        vecs = vecs[:, np.argsort(vals)[::-1]]
        proj = x @ vecs
        n = x.shape[0]
        sd = np.maximum(proj.std(axis=0), 1e-300)
        z_mean = (mu @ vecs) / (sd / np.sqrt(n))
        z_skew = np.mean(((proj - proj.mean(axis=0)) / sd) ** 3, axis=0) / np.sqrt(6.0 / n)
        return vecs, z_mean, z_skew

    vs, ms, ks = basis(s)
    vp, mp, kp = basis(p)
    signs = np.sign(ms * mp + ks * kp)
    signs[signs == 0] = 1.0
    return (vs * signs) @ vp.T


def _zca(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x centred and whitened with its own symmetric C^-1/2, C^1/2)``: rotating ``x`` rotates both alike."""
    vals, vecs = np.linalg.eigh(np.cov(x, rowvar=False))
    root = np.sqrt(np.maximum(vals, 1e-12 * vals.max()))
    return (x - x.mean(axis=0)) @ ((vecs / root) @ vecs.T), (vecs * root) @ vecs.T


def _ica_init(s: np.ndarray, p: np.ndarray, seed: int, max_iter: int) -> np.ndarray:
    """Match independent components: unlike eigenvectors they need no eigenvalue gaps, and survive whitening.

    Each side is whitened with its own covariance and unmixed by FastICA; the rotation carries the
    stored components onto the public ones up to order and sign. Signs are fixed by skewness, the
    order by matching what a rotation leaves unchanged (Hungarian): each component's quantile
    function (its shape, in its own units: a 1-D Wasserstein distance), its mean and its log scale
    before whitening (all three in comparable units, so none needs a weight). ``Q = Ks^T Kp[perm]``.
    """
    from sklearn.decomposition import FastICA  # heavy; only this start needs it

    levels = np.linspace(0.005, 0.995, 199)
    units = []
    for x in (s, p):
        z, root = _zca(x)
        k = FastICA(whiten=False, max_iter=max_iter, tol=1e-5, random_state=seed).fit(z).components_
        k /= np.linalg.norm(k, axis=1, keepdims=True)
        k *= np.where(np.mean((z @ k.T) ** 3, axis=0) < 0, -1.0, 1.0)[:, None]
        shape = np.quantile(z @ k.T, levels, axis=0).T / np.sqrt(levels.size)
        mean = x.mean(axis=0) @ np.linalg.pinv(root) @ k.T
        units.append((k, np.column_stack([shape, mean, np.log(np.linalg.norm(k @ root, axis=1))])))
    (ks, fs), (kp, fp) = units
    return _polar(ks.T @ kp[_assign(_sq_dist(fs, fp))])


def _csls_mutual_pairs(x: np.ndarray, y: np.ndarray, k: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Mutual nearest neighbours of unit rows ``x`` and ``y`` under CSLS (Conneau et al. 2018)."""
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    kx, ky = min(k, y.shape[0]), min(k, x.shape[0])

    def topk_mean(a: np.ndarray, b: np.ndarray, kk: int) -> np.ndarray:
        out = np.empty(a.shape[0], dtype=np.float32)
        for i in range(0, a.shape[0], chunk):
            sims = a[i : i + chunk] @ b.T
            out[i : i + chunk] = np.partition(sims, -kk, axis=1)[:, -kk:].mean(axis=1)
        return out

    rx, ry = topk_mean(x32, y32, kx), topk_mean(y32, x32, ky)

    def best(a: np.ndarray, b: np.ndarray, rb: np.ndarray) -> np.ndarray:
        # CSLS(a_i, b_j) = 2 cos - r_a[i] - r_b[j]; r_a[i] is constant along a row, so it drops out.
        out = np.empty(a.shape[0], dtype=np.int64)
        for i in range(0, a.shape[0], chunk):
            out[i : i + chunk] = np.argmax(2.0 * (a[i : i + chunk] @ b.T) - rb[None, :], axis=1)
        return out

    fwd = best(x32, y32, ry)
    bwd = best(y32, x32, rx)
    mutual = np.flatnonzero(bwd[fwd] == np.arange(x.shape[0]))
    return mutual, fwd[mutual]


def align_rotation(
    stored: Any,
    public: Any,
    *,
    init: Literal["eigen", "ica", "identity"] = "eigen",
    n_iter: int = 20,
    csls_k: int = 10,
    max_points: int = 20_000,
    ica_max_iter: int = ICA_MAX_ITER,
    seed: int = 0,
) -> np.ndarray:
    """Recover a secret rotation with zero known pairs, from the attacker's own public embeddings.

    The unsupervised word-translation recipe (Conneau et al. 2018), with the adversarial step replaced
    by a moment-based start since both sides come from one encoder (:func:`_eigen_init`,
    :func:`_ica_init`); then up to ``n_iter`` times (until the pairs stop changing): un-key the store
    with the current estimate, pair stored and public vectors that are CSLS mutual nearest
    neighbours, and solve orthogonal Procrustes on the pairs. The texts differ, so pairs are
    neighbours, not translations; the refinement needs public text close to the stored text.

    Args:
        stored: ``(n, D)`` stored vectors ``clean @ Q.T`` (possibly after noise).
        public: ``(m, D)`` the attacker's clean embeddings of public text.
        init: ``"eigen"`` (second moments), ``"ica"`` (independent components: for whitened
            releases, whose covariance says nothing) or ``"identity"`` (refinement only, a baseline).
        n_iter: Procrustes refinement rounds (0: the initial estimate only).
        csls_k: Neighbourhood size of the CSLS hubness correction.
        max_points: Each side is subsampled (with ``seed``) to at most this many rows.
        ica_max_iter: FastICA's iteration cap for ``init="ica"`` (each iteration is an eigendecomposition of
            a ``D x D`` matrix: a plumbing check may cap it low; the attack's strength needs the default).
        seed: Seed of the subsampling and of FastICA; the result is a deterministic function of it.

    Returns:
        ``Q_hat`` (orthogonal) with ``stored ≈ clean @ Q_hat.T``; ``unkey(stored, Q_hat)`` estimates the clean vectors.
    """
    if init not in ("eigen", "ica", "identity"):
        raise InvalidInputError(f"init must be 'eigen', 'ica' or 'identity', got {init!r}")
    ica_max_iter = check_int(ica_max_iter, name="ica_max_iter", low=1, high=1_000_000)
    s = check_vectors(stored, name="stored", allow_zero_rows=True).astype(np.float64)
    p = check_vectors(public, name="public", dim=s.shape[1], allow_zero_rows=True).astype(np.float64)
    rng = np.random.default_rng(seed)
    s, p = _subsample(s, max_points, rng), _subsample(p, max_points, rng)
    if init == "eigen":
        q = _eigen_init(s, p)
    elif init == "ica":
        q = _ica_init(s, p, seed, ica_max_iter)
    else:
        q = np.eye(s.shape[1])
    s_unit, p_unit = unit_rows(s), unit_rows(p)
    previous: tuple[np.ndarray, np.ndarray] | None = None
    for _ in range(max(0, int(n_iter))):
        i_s, i_p = _csls_mutual_pairs(s_unit @ q, p_unit, max(1, int(csls_k)))
        if i_s.size == 0 or (previous is not None and all(map(np.array_equal, previous, (i_s, i_p)))):
            break  # no pairs, or the same pairs as last round: Procrustes would return the same q
        previous = (i_s, i_p)
        q = _polar(s_unit[i_s].T @ p_unit[i_p])
    return q


def unkey(stored: Any, transform: Any) -> np.ndarray:
    """The attacker's estimate of the clean vectors: ``stored @ pinv(T).T`` (``stored @ T`` when orthogonal).

    ``transform`` is a ``(D, D)`` matrix or a permutation from :func:`permutation_from_pairs` /
    :func:`align_permutation`.
    """
    s = check_vectors(stored, name="stored", allow_zero_rows=True).astype(np.float64)
    t = _as_matrix(transform, s.shape[1])
    # rcond at float32 precision: a ridge estimate from k < D pairs has rank k; inverting round-off returns noise.
    return (s @ np.linalg.pinv(t, rcond=1e-6).T).astype(np.float32)


def _as_matrix(transform: Any, dim: int | None = None) -> np.ndarray:
    t = np.asarray(transform)
    m = permutation_to_matrix(t) if t.ndim == 1 else np.asarray(t, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or (dim is not None and m.shape[0] != dim):
        raise InvalidInputError(f"a transform must be a permutation or a square matrix of the vectors' size: {t.shape}")
    if not np.isfinite(m).all():
        raise InvalidInputError("the transform contains NaN or Inf")
    return m
