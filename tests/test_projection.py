from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from textcrafter_rag.textcrafter.projection import fallback_direction, project_perturbation

_F64 = np.finfo(np.float64)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _check(delta: torch.Tensor, v: torch.Tensor, eps: float) -> None:
    p = project_perturbation(delta, v, eps)
    assert torch.isfinite(p).all()
    norms = p.double().norm(dim=-1)
    assert torch.allclose(norms, torch.full_like(norms, eps), rtol=1e-6, atol=0)
    dots = (p.double() * v.double()).sum(-1)
    assert dots.abs().max() <= 1e-6 * eps


@pytest.mark.parametrize("dim", [2, 3, 32, 384, 768])
def test_norm_and_orthogonality_random(dim: int) -> None:
    g = torch.Generator().manual_seed(dim)
    delta = torch.randn(500, dim, generator=g) * torch.logspace(-8, 4, 500)[:, None]
    v = _unit(torch.randn(500, dim, generator=g))
    _check(delta, v, 2.5)


def test_adversarial_inputs_use_fallback_without_nan() -> None:
    g = torch.Generator().manual_seed(1)
    v = _unit(torch.randn(6, 64, generator=g))
    delta = torch.stack(
        [
            torch.zeros(64),  # delta = 0
            v[1] * 3.0,  # exactly parallel to v
            -v[2] * 1e-30,  # tiny and antiparallel
            v[3] + 1e-12 * torch.randn(64, generator=g),  # nearly parallel
            torch.full((64,), 1e30),  # huge
            torch.randn(64, generator=g),
        ]
    )
    _check(delta, v, 0.7)
    p = project_perturbation(delta[:2], v[:2], 0.7)
    assert torch.allclose(p, 0.7 * fallback_direction(v[:2].double()).float(), atol=1e-6)


def test_fallback_is_deterministic_and_orthogonal() -> None:
    v = _unit(torch.randn(100, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    w1, w2 = fallback_direction(v), fallback_direction(v)
    assert torch.equal(w1, w2)
    assert (w1 * v).sum(-1).abs().max() < 1e-12
    assert torch.allclose(w1.norm(dim=-1), torch.ones(100, dtype=torch.float64))
    # Basis-aligned v (the worst case for a basis-vector fallback).
    e = torch.eye(16, dtype=torch.float64)
    assert (fallback_direction(e) * e).sum(-1).abs().max() == 0


@settings(max_examples=200, deadline=None)
@given(
    # Every finite float64, subnormals included: the sum of squares of a naive norm under- or
    # overflows at both ends of this range.
    delta=arrays(np.float64, (3, 8), elements=st.floats(-_F64.max, _F64.max, allow_nan=False, allow_infinity=False)),
    d=arrays(np.float64, (3, 8), elements=st.floats(-10, 10, allow_nan=False, allow_subnormal=False)),
    eps=st.floats(1e-3, 100.0),
)
# Found by the random search (issue 12): 5.8e-162 in every coordinate gave norm 0.988, not 1.0.
@example(delta=np.full((3, 8), 5.8e-162), d=np.zeros((3, 8)), eps=1.0)
@example(delta=np.full((3, 8), 1e300), d=np.zeros((3, 8)), eps=1.0)
@example(delta=np.full((3, 8), 5e-324), d=np.zeros((3, 8)), eps=2.5)
def test_property_norm_and_orthogonality(delta: np.ndarray, d: np.ndarray, eps: float) -> None:
    d = d + np.eye(3, 8)  # keep v away from zero
    v = torch.as_tensor(d / np.linalg.norm(d, axis=1, keepdims=True))
    _check(torch.as_tensor(delta), v, eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("magnitude", [5.8e-162, 1e-300, 1e-40, 1e-30, 1e30, 1e300])
def test_tiny_and_huge_deltas_keep_the_exact_norm(dtype: torch.dtype, magnitude: float) -> None:
    """The issue-12 regression: every coordinate 5.8e-162 along a basis-vector v, and its relatives."""
    finfo = torch.finfo(dtype)
    value = min(max(magnitude, float(finfo.smallest_normal) * finfo.eps), float(finfo.max) / 64)
    delta = torch.full((4, 8), value, dtype=dtype)
    delta[1] *= -1
    delta[2, ::2] *= -1
    delta[3, 0] = 0  # not parallel to v = e_0 in row 3 either
    v = torch.eye(8, dtype=dtype)[:4]
    p = project_perturbation(delta, v, 1.0)
    assert p.dtype == dtype
    norms = p.double().norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), rtol=4 * finfo.eps, atol=0)
    assert (p.double() * v.double()).sum(-1).abs().max() <= 4 * finfo.eps


def test_gradient_flows_to_direction() -> None:
    v = torch.randn(4, 8, requires_grad=True)
    delta = torch.randn(4, 8)
    project_perturbation(delta, _unit(v), 1.0).sum().backward()
    assert v.grad is not None and v.grad.abs().sum() > 0
