"""The sphere projection that makes every release exactly ``eps`` away, orthogonal to ``v``.

Norms are computed on rows pre-scaled by their largest magnitude
(:mod:`textcrafter_rag.numerics`), so the guarantee holds for every finite ``delta``, from
subnormal to near the float64 maximum.
"""

from __future__ import annotations

import torch

from ..numerics import torch_row_norms, torch_unit_rows

__all__ = ["project_perturbation", "fallback_direction", "release"]


def fallback_direction(v: torch.Tensor) -> torch.Tensor:
    """A deterministic unit vector orthogonal to each unit row of ``v``.

    Uses the basis vector ``e_k`` with ``k = argmin |v_k|`` (so ``|v_k| <= 1/sqrt(D) < 1``)
    and removes its component along ``v``; the result is never zero.
    """
    k = v.abs().argmin(dim=-1, keepdim=True)
    e = torch.zeros_like(v).scatter_(-1, k, 1.0)
    w = e - (e * v).sum(-1, keepdim=True) * v
    return w / w.norm(dim=-1, keepdim=True)


def project_perturbation(delta: torch.Tensor, v: torch.Tensor, eps: float | torch.Tensor) -> torch.Tensor:
    """``eps * (delta - (delta.v)v) / ||delta - (delta.v)v||``, row-wise, computed in float64.

    Rows where ``delta`` has no component orthogonal to ``v`` beyond rounding noise (``delta = 0``
    or ``delta`` parallel to ``v``) use :func:`fallback_direction` instead of dividing by zero. The
    projection is applied twice (re-orthogonalisation) so the result stays orthogonal to ``v`` to
    machine precision even when ``delta`` is nearly parallel to it. Differentiable in ``v`` and ``delta``.

    Args:
        delta: Raw perturbations, shape ``(n, D)``, any finite magnitude.
        v: Directions, shape ``(n, D)`` (normalised here).
        eps: The target norm (> 0).

    Returns:
        Perturbations of shape ``(n, D)`` in ``delta``'s dtype with norm ``eps`` and ``<., v> = 0``.
    """
    dtype = delta.dtype
    u = torch_unit_rows(v.to(torch.float64))
    d = torch_unit_rows(delta.to(torch.float64))  # scale out the magnitude first: nothing under/overflows
    for _ in range(2):
        d = d - (d * u).sum(-1, keepdim=True) * u
    norm = torch_row_norms(d)
    # ||d|| was 1 (or 0) before the projection: a residual below a few ulps of the input
    # precision is rounding noise, not a direction.
    tol = 64.0 * torch.finfo(dtype if dtype.is_floating_point else torch.float32).eps
    degenerate = norm <= tol
    if bool(degenerate.any()):
        d = torch.where(degenerate, fallback_direction(u), d)
        norm = torch.where(degenerate, torch.ones_like(norm), norm)
    return (eps * (d / norm)).to(dtype)


def release(f0: torch.Tensor, delta: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    """``f_adv = f0 + eps * (delta - (delta.v)v) / ||delta - (delta.v)v||``."""
    return f0 + project_perturbation(delta, v, eps)
