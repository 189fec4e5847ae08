"""The policy network and the sphere projection in NumPy: what protecting a vector runs.

The runtime install has no torch, so inference is written here once more in NumPy, float32 like the torch
modules (:mod:`.policy`, :mod:`.projection`) and with the same guarantees: every release moves by exactly
``eps``, orthogonally to ``v``, for every finite input (the projection runs in float64 on rows pre-scaled by
their largest magnitude). ``tests/test_numpy_policy.py`` checks both paths agree within 1e-5.

Self-attention over a length-one sequence is its value and output projections (the softmax is 1), and
the residual around it is linear too, so a branch's first sub-layer is one matrix: ``h (I + W_v^T W_o^T)
+ b``. :class:`NumpyPolicy` folds it (and the positional vector) once when it owns its weights
(``fold=True``, a loaded policy: four matrix products per branch instead of five); over weights shared
with a torch module that training may still change, it computes each product as the module does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..errors import InvalidInputError
from ..numerics import unit_rows
from .configs import PolicyConfig

__all__ = ["PolicyArrays", "NumpyPolicy", "policy_state_shapes", "erf", "project_perturbation", "release"]

_BRANCHES = ("mean_branch", "direction_branch")
#: nn.LayerNorm's default epsilon, as the torch policy uses it.
_LN_EPS = np.float32(1e-5)
# Eigen's float32 erf (p/q rational on [-4, 4], erf = +-1 to float32 outside): max abs error 4.2e-7.
_ERF_P = tuple(
    np.float32(c)
    for c in (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    )
)
_ERF_Q = tuple(
    np.float32(c)
    for c in (
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)
_SQRT_HALF = np.float32(0.7071067811865476)
#: Rows per block of the forward pass: a block's intermediates (a few arrays of BLOCK x D float32) stay in cache.
BLOCK = 512


class PolicyArrays(NamedTuple):
    """Per row: the Gaussian's mean ``mu``, its scale ``sigma`` (broadcast to ``mu``) and the unit direction ``v``."""

    mu: np.ndarray
    sigma: np.ndarray
    v: np.ndarray


def policy_state_shapes(config: PolicyConfig) -> dict[str, tuple[int, ...]]:
    """The torch policy's ``state_dict`` names and shapes: what a saved policy must hold, exactly."""
    d, f = config.dim, config.ffn_dim or config.dim
    branch = {
        "position": (1, d),
        "attention.in_proj_weight": (3 * d, d),
        "attention.in_proj_bias": (3 * d,),
        "attention.out_proj.weight": (d, d),
        "attention.out_proj.bias": (d,),
        "norm1.weight": (d,),
        "norm1.bias": (d,),
        "ffn.0.weight": (f, d),
        "ffn.0.bias": (f,),
        "ffn.2.weight": (d, f),
        "ffn.2.bias": (d,),
        "norm2.weight": (d,),
        "norm2.bias": (d,),
        "head.weight": (d, d),
        "head.bias": (d,),
    }
    shapes = {f"{b}.{k}": s for b in _BRANCHES for k, s in branch.items()}
    shapes["log_sigma"] = (d,)
    return shapes


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of a float32 array, in float32 (NumPy has none; SciPy is not a runtime dependency)."""
    x = np.clip(x, np.float32(-4.0), np.float32(4.0))
    x2 = x * x
    p = x2 * _ERF_P[0] + _ERF_P[1]
    for c in _ERF_P[2:]:
        p *= x2
        p += c
    p *= x
    q = x2 * _ERF_Q[0] + _ERF_Q[1]
    for c in _ERF_Q[2:]:
        q *= x2
        q += c
    p /= q
    return p


def _gelu(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)`` with the exact erf, in place (``nn.GELU()``'s default)."""
    e = erf(x * _SQRT_HALF)
    e += np.float32(1.0)
    e *= np.float32(0.5)
    x *= e
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """``nn.LayerNorm`` over the last axis (biased variance, eps 1e-5), in place; ``None``: no affine part."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var /= np.float32(x.shape[-1])
    var += _LN_EPS
    x /= np.sqrt(var)
    if weight is not None:
        x *= weight
        x += bias
    return x


class _Branch:
    """One branch's weights, for ``x @ W`` (contiguous and its first sub-layer folded when ``fold``)."""

    def __init__(self, state: Mapping[str, np.ndarray], prefix: str, dim: int, *, fold: bool) -> None:
        def w(name: str) -> np.ndarray:
            return state[f"{prefix}.{name}"]

        def t(name: str) -> np.ndarray:  # BLAS is much faster on a contiguous right operand than on a view of W.T
            return np.ascontiguousarray(w(name).T) if fold else w(name).T

        self.fold = fold
        self.position = w("position")
        w_v, b_v = w("attention.in_proj_weight")[2 * dim :], w("attention.in_proj_bias")[2 * dim :]
        w_o, b_o = w("attention.out_proj.weight"), w("attention.out_proj.bias")
        if fold:  # h1 = LN1((x + p)(I + W_v^T W_o^T) + W_o b_v + b_o): one matrix (products in float64)
            first = np.eye(dim) + w_v.T.astype(np.float64) @ w_o.T.astype(np.float64)
            bias = self.position[0].astype(np.float64) @ first + w_o.astype(np.float64) @ b_v + b_o
            self.first, self.first_bias = first.astype(np.float32), bias.astype(np.float32)
        else:
            self.w_v, self.b_v, self.w_o, self.b_o = w_v.T, b_v, w_o.T, b_o
        self.norm1 = (w("norm1.weight"), w("norm1.bias"))
        self.ffn1 = (t("ffn.0.weight"), w("ffn.0.bias"))
        self.ffn2 = (t("ffn.2.weight"), w("ffn.2.bias"))
        self.norm2: tuple[np.ndarray | None, np.ndarray | None] = (w("norm2.weight"), w("norm2.bias"))
        self.head = (t("head.weight"), w("head.bias"))
        if fold:  # the second LayerNorm feeds only the head: its scale and shift fold into the head
            scale, shift = (a.astype(np.float64) for a in self.norm2)
            head_t = self.head[0].astype(np.float64)
            self.head = (
                (scale[:, None] * head_t).astype(np.float32),
                (shift @ head_t + self.head[1]).astype(np.float32),
            )
            self.norm2 = (None, None)

    def first_layer(self, x: np.ndarray) -> np.ndarray:
        """The residual self-attention sub-layer before its LayerNorm: ``(x + p) + attend(x + p)``."""
        if self.fold:
            h = x @ self.first
            h += self.first_bias
            return h
        h = x + self.position
        attended = h @ self.w_v
        attended += self.b_v
        attended = attended @ self.w_o
        attended += self.b_o
        h += attended
        return h

    def rest(self, h: np.ndarray) -> np.ndarray:
        """From the first LayerNorm to the head, on the first sub-layer's output ``h`` (changed in place)."""
        h = _layer_norm(h, *self.norm1)
        hidden = h @ self.ffn1[0]
        hidden += self.ffn1[1]
        out = _gelu(hidden) @ self.ffn2[0]
        out += self.ffn2[1]
        out += h
        out = _layer_norm(out, *self.norm2)
        head = out @ self.head[0]
        head += self.head[1]
        return head


class NumpyPolicy:
    """The two-branch policy ``x -> (mu, sigma, v)`` over a ``state_dict`` of float32 arrays (inference only).

    Args:
        config: The architecture.
        state: The weights under the torch policy's ``state_dict`` names; exactly those names and shapes
            (:func:`policy_state_shapes`). Kept by reference: over a torch module's parameters, its changes show.
        fold: Fold each branch's first sub-layer into one matrix (only for weights nothing else changes).

    Raises:
        InvalidInputError: A missing, unexpected or misshapen weight.
    """

    def __init__(self, config: PolicyConfig, state: Mapping[str, np.ndarray], *, fold: bool = False) -> None:
        expected = policy_state_shapes(config)
        missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or unexpected:
            raise InvalidInputError(f"policy weights: missing {missing}, unexpected {unexpected}")
        for name, shape in expected.items():
            if tuple(np.shape(state[name])) != shape:
                raise InvalidInputError(f"policy weight {name} has shape {np.shape(state[name])}, expected {shape}")
            if np.asarray(state[name]).dtype != np.float32:
                raise InvalidInputError(f"policy weight {name} must be float32")
        self.config = config
        self.state = dict(state)
        self.fold = bool(fold)
        self._branches = tuple(_Branch(self.state, b, config.dim, fold=self.fold) for b in _BRANCHES)
        self._first = self._first_bias = None
        if self.fold:
            self._first = np.ascontiguousarray(np.concatenate([b.first for b in self._branches], axis=1))
            self._first_bias = np.concatenate([b.first_bias for b in self._branches])

    def sigma(self) -> np.ndarray:
        """``sigma = exp(lambda)``, with ``lambda`` clamped below at ``min_log_sigma`` (float32, ``(D,)``)."""
        return np.exp(np.maximum(self.state["log_sigma"], np.float32(self.config.min_log_sigma)))

    def __call__(self, x: np.ndarray) -> PolicyArrays:
        """``(mu, sigma, v)`` for a float32 batch ``(n, D)`` (dropout off).

        Rows go through in blocks of :data:`BLOCK`, so each block's intermediates stay in the CPU's cache.
        """
        x = np.asarray(x, dtype=np.float32)
        sigma = self.sigma()
        cap = np.float32(self.config.max_snr) * np.sqrt(np.sum(sigma * sigma, dtype=np.float32))
        mu, v = np.empty_like(x), np.empty_like(x)
        for start in range(0, x.shape[0], BLOCK):
            rows = slice(start, start + BLOCK)
            mu[rows], v[rows] = self._block(x[rows], cap)
        return PolicyArrays(mu=mu, sigma=np.broadcast_to(sigma, mu.shape), v=v)

    def _block(self, x: np.ndarray, cap: np.float32) -> tuple[np.ndarray, np.ndarray]:
        mean_branch, direction_branch = self._branches
        if self._first is not None:  # both folded first sub-layers in one product
            both = x @ self._first
            both += self._first_bias
            h_mean, h_direction = both[:, : self.config.dim], both[:, self.config.dim :]
        else:
            h_mean, h_direction = mean_branch.first_layer(x), direction_branch.first_layer(x)
        mu = mean_branch.rest(h_mean)
        norm = np.sqrt(np.einsum("ij,ij->i", mu, mu))[:, None]
        mu *= np.minimum(cap / np.maximum(norm, np.float32(1e-12)), np.float32(1.0))
        d = direction_branch.rest(h_direction)
        dn = np.sqrt(np.einsum("ij,ij->i", d, d))[:, None]
        e0 = np.zeros_like(d)
        e0[:, 0] = 1.0
        return mu, np.where(dn > 1e-12, d / np.maximum(dn, np.float32(1e-12)), e0)


def _fallback_direction(u: np.ndarray) -> np.ndarray:
    """A unit vector orthogonal to each unit row of ``u``: ``e_k`` (``k = argmin |u_k|``) minus its part along ``u``."""
    k = np.abs(u).argmin(axis=1)
    e = np.zeros_like(u)
    e[np.arange(u.shape[0]), k] = 1.0
    w = e - np.sum(e * u, axis=1, keepdims=True) * u
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` at unit norm in float64 (all-zero rows stay zero), without under- or overflow.

    A float32 row needs no pre-scaling: in float64 its squares lie between 1e-90 and 1e77. Wider rows take
    :func:`~textcrafter_rag.numerics.unit_rows`, which scales each row by its largest magnitude first.
    """
    if x.dtype.itemsize > 4:
        return unit_rows(x)
    y = x.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", y, y))[:, None]
    y /= np.where(norms > 0, norms, 1.0)
    return y


def project_perturbation(delta: np.ndarray, v: np.ndarray, eps: float) -> np.ndarray:
    """``eps * (delta - (delta.v)v) / ||delta - (delta.v)v||`` row-wise, in float64 (as :mod:`.projection`).

    Rows with no component orthogonal to ``v`` beyond rounding noise (``delta = 0`` or parallel to ``v``) take
    the deterministic fallback direction. Returns float64.
    """
    u = _unit(v)
    d = _unit(delta)  # magnitude scaled out first: nothing under- or overflows
    for _ in range(2):  # re-orthogonalised: orthogonal to machine precision even for delta nearly along v
        d -= np.einsum("ij,ij->i", d, u)[:, None] * u
    norm = np.sqrt(np.einsum("ij,ij->i", d, d))[:, None]
    degenerate = norm <= 64.0 * np.finfo(np.float32).eps  # ||d|| was 1 (or 0): below this it is rounding noise
    if degenerate.any():
        d = np.where(degenerate, _fallback_direction(u), d)
        norm = np.where(degenerate, 1.0, norm)
    d *= eps / norm
    return d


def release(f0: np.ndarray, delta: np.ndarray, v: np.ndarray, eps: float) -> np.ndarray:
    """``f_adv = f0 + eps * P_v(delta)`` in float32 (the perturbation computed in float64, then rounded)."""
    out = project_perturbation(delta, v, eps).astype(np.float32)
    out += f0
    return out
