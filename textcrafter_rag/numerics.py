"""Numerically safe row norms, unit rows and cosines, in NumPy and torch.

A plain ``sqrt(sum(x**2))`` underflows for rows whose entries are all below about 1e-154
(float64) or 1e-19 (float32) and overflows above about 1e154 / 1e19, so a norm guarantee
computed that way fails on finite inputs. Every function here first divides each row by its
largest magnitude, which makes the sum of squares lie in ``[1, D]``, and multiplies back.
Every mechanism that normalises uses these helpers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch comes with the `fit` extra; only the torch helpers below import it
    import torch

__all__ = ["row_norms", "unit_rows", "row_cosines", "torch_row_norms", "torch_unit_rows", "plain_torch"]


def _row_scale(x64: np.ndarray) -> np.ndarray:
    scale = np.abs(x64).max(axis=1, keepdims=True)
    return np.where(scale > 0, scale, 1.0)


def row_norms(x: np.ndarray) -> np.ndarray:
    """L2 norm of every row of ``x`` ``(n, D)``, in float64, without under- or overflow."""
    x64 = np.asarray(x, dtype=np.float64)
    scale = _row_scale(x64)
    return scale[:, 0] * np.linalg.norm(x64 / scale, axis=1)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Every row of ``x`` scaled to unit L2 norm, in float64. All-zero rows stay zero."""
    x64 = np.asarray(x, dtype=np.float64)
    y = x64 / _row_scale(x64)
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    return y / np.where(norms > 0, norms, 1.0)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows of ``a`` and ``b`` (both ``(n, D)``), in float64."""
    return np.sum(unit_rows(a) * unit_rows(b), axis=1)


def _torch_row_scale(x: torch.Tensor) -> torch.Tensor:
    import torch

    # Detached: the norm is homogeneous, so the scale contributes no gradient in exact arithmetic.
    scale = x.detach().abs().amax(dim=-1, keepdim=True)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def torch_row_norms(x: torch.Tensor) -> torch.Tensor:
    """Row norms ``(n, 1)`` of ``x`` without under- or overflow; differentiable."""
    scale = _torch_row_scale(x)
    return scale * (x / scale).norm(dim=-1, keepdim=True)


def torch_unit_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` scaled to unit norm without under- or overflow; all-zero rows stay zero."""
    import torch

    y = x / _torch_row_scale(x)
    norms = y.norm(dim=-1, keepdim=True)
    return y / torch.where(norms > 0, norms, torch.ones_like(norms))


@contextlib.contextmanager
def plain_torch(*, grad: bool = False) -> Iterator[None]:
    """Run torch code immune to the caller's torch state.

    Inside, autocast is off (a caller's ``torch.autocast(dtype=torch.bfloat16)`` region would
    otherwise run the policy in bf16 and break the norm guarantee), inference mode is off and
    gradients are on only when ``grad`` is set. Thread settings are left alone: they change
    speed, not results. Tensors are created with explicit dtypes by the callers, so the default
    dtype does not matter either.
    """
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", enabled=False))
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.set_grad_enabled(grad))
        yield
