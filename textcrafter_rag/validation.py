"""Input validation shared by every public entry point.

Error messages name the problem and the offending row or position, never the
values themselves: raw vectors and texts must not leak into logs or tracebacks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidInputError, InvalidTypeError, ProtectionError

__all__ = [
    "check_int",
    "check_vectors",
    "check_store_vectors",
    "check_texts",
    "check_text",
    "check_positive",
    "check_released",
]

_FLOAT_KINDS = ("f",)


def _dtype_name(dtype: np.dtype) -> str:
    # "<U13" would give away the length of the longest string: name the kind only
    return {"U": "str", "S": "bytes", "O": "object"}.get(dtype.kind, str(dtype))


def check_vectors(
    x: Any,
    *,
    dim: int | None = None,
    name: str = "embeddings",
    allow_zero_rows: bool = False,
    cast_numbers: bool = False,
) -> np.ndarray:
    """Validate a batch of embeddings and return it as a C-contiguous float32 copy.

    Args:
        x: A 2-D array-like of shape ``(n, D)`` with a floating-point dtype.
        dim: The expected dimension ``D``; ``None`` accepts any.
        name: What to call the input in error messages.
        allow_zero_rows: Accept all-zero rows (they are rejected by default since a
            zero embedding is almost always a bug upstream).
        cast_numbers: Accept integer input as float64 (an encoder's output given as lists).
            Strings are refused either way, by type, never by value.

    Returns:
        A new float32 array; the caller's array is never modified.

    Raises:
        InvalidTypeError: The input is not a floating-point array (integers, booleans,
            objects and strings are refused rather than silently cast).
        InvalidInputError: Wrong rank, wrong dimension, an empty batch, NaN/Inf, or zero rows.
    """
    if isinstance(x, (str, bytes)):
        raise InvalidTypeError(f"{name} must be a 2-D float array of shape (n, D), got a string")
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception:  # ragged lists and other unconvertible input
            raise InvalidTypeError(
                f"{name} could not be read as a 2-D float array (ragged or non-numeric rows)"
            ) from None
        if x.dtype == object:
            raise InvalidTypeError(f"{name} could not be read as a 2-D float array (ragged or non-numeric rows)")
    if cast_numbers and x.dtype.kind in "iu":
        x = x.astype(np.float64)
    if x.dtype.kind not in _FLOAT_KINDS:
        raise InvalidTypeError(
            f"{name} must have a floating-point dtype (float16/32/64), got {_dtype_name(x.dtype)}; "
            "cast explicitly if integer input is really intended"
        )
    if x.ndim != 2:
        hint = " (use x[None, :] for a single vector)" if x.ndim == 1 else ""
        raise InvalidInputError(f"{name} must be 2-D with shape (n, D), got {x.ndim}-D{hint}")
    n, d = x.shape
    if n == 0:
        raise InvalidInputError(f"{name} is an empty batch (0 rows)")
    if d == 0:
        raise InvalidInputError(f"{name} has dimension 0")
    if dim is not None and d != dim:
        raise InvalidInputError(f"{name} has dimension {d}, expected {dim}")
    finite = np.isfinite(x)
    if not finite.all():
        bad = np.flatnonzero(~finite.all(axis=1))
        raise InvalidInputError(f"{name} contains NaN or Inf in {bad.size} row(s), first at row {int(bad[0])}")
    with np.errstate(over="ignore"):
        out = np.array(x, dtype=np.float32, order="C", copy=True)
    if not np.isfinite(out).all():  # float64 values beyond float32 range
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        raise InvalidInputError(f"{name} overflows float32 in {bad.size} row(s), first at row {int(bad[0])}")
    if not allow_zero_rows:
        zero = ~out.any(axis=1)
        if zero.any():
            bad = np.flatnonzero(zero)
            raise InvalidInputError(f"{name} has {bad.size} all-zero row(s), first at row {int(bad[0])}")
    return out


#: Row norms a sealed store accepts: far outside every encoder's range, inside what float32 directions can carry.
STORE_NORM_RANGE = (1e-30, 1e30)


def check_store_vectors(x: Any, *, dim: int | None = None, name: str = "embeddings") -> np.ndarray:
    """Validate vectors on their way to a sealed store, once, for every store path (add, query, by vector).

    An encoder's output (lists of numbers, integers included) is accepted; strings and other objects are
    refused by type, never echoed (an encoder that returns its input would put it in the message). On top
    of :func:`check_vectors`, each row's norm must lie in :data:`STORE_NORM_RANGE`: a 3e38 row overflows
    a float32 direction, a 1e-44 row is subnormal and packs to zeros, and either would reach the store as a
    vector that silently breaks every later search.

    Returns:
        A float32 copy of shape ``(n, D)``.

    Raises:
        InvalidTypeError: Not a numeric 2-D batch (a string, ragged rows, objects).
        InvalidInputError: Wrong shape or dimension, empty, NaN/Inf or all-zero rows.
        ProtectionError: A row whose norm is outside :data:`STORE_NORM_RANGE` (named by index).
    """
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        raise InvalidTypeError(f"{name} must be numbers, got {_dtype_name(x.dtype)} values")
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception:
            raise InvalidTypeError(
                f"{name} could not be read as a 2-D float array (ragged or non-numeric rows)"
            ) from None
        if x.dtype.kind in "USOb":
            raise InvalidTypeError(f"{name} must be numbers, got {_dtype_name(x.dtype)} values")
    if x.dtype.kind == "f" and x.dtype.itemsize > 4:
        with np.errstate(over="ignore"):
            norms64 = np.sqrt(np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64)))
    else:
        norms64 = None
    out = check_vectors(x, dim=dim, name=name, cast_numbers=True)
    norms = (
        norms64
        if norms64 is not None
        else np.sqrt(np.einsum("ij,ij->i", out.astype(np.float64), out.astype(np.float64)))
    )
    low, high = STORE_NORM_RANGE
    bad = np.flatnonzero(~((norms >= low) & (norms <= high)))
    if bad.size:
        raise ProtectionError(
            f"{name}: {bad.size} row(s) have a norm outside [{low:g}, {high:g}], first at row {int(bad[0])}: "
            "rescale the encoder's output; nothing was stored or sent"
        )
    return out


def check_text(text: Any, *, name: str = "text") -> str:
    """Validate one text: it must be a non-empty ``str``."""
    if not isinstance(text, str):
        raise InvalidTypeError(f"{name} must be str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidInputError(f"{name} is empty or whitespace only")
    return text


def check_texts(texts: Any, *, name: str = "texts", allow_empty_batch: bool = False) -> list[str]:
    """Validate a batch of texts: a sequence (not a bare string) of non-empty strings."""
    if isinstance(texts, (str, bytes)):
        raise InvalidTypeError(
            f"{name} must be a sequence of str, got a bare {type(texts).__name__}; wrap it in a list"
        )
    if not isinstance(texts, Sequence):
        try:
            texts = list(texts)
        except TypeError:
            raise InvalidTypeError(f"{name} must be a sequence of str, got {type(texts).__name__}") from None
    if not texts and not allow_empty_batch:
        raise InvalidInputError(f"{name} is an empty batch")
    out: list[str] = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidTypeError(f"{name}[{i}] must be str, got {type(t).__name__}")
        if not t.strip():
            raise InvalidInputError(f"{name}[{i}] is empty or whitespace only")
        out.append(t)
    return out


def check_positive(value: Any, *, name: str) -> float:
    """Validate a finite number ``> 0`` (a mechanism parameter such as ``eps`` or ``s``); booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidInputError(f"{name} must be a finite number > 0, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise InvalidInputError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_int(value: Any, *, name: str, low: int, high: int) -> int:
    """Validate an int in ``[low, high]`` (an option such as ``open_k``); booleans and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidInputError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise InvalidInputError(f"{name} must be between {low} and {high}, got {int(value)}")
    return int(value)


def check_released(out: np.ndarray, *, shape: tuple[int, ...], by: str, name: str = "embeddings") -> np.ndarray:
    """Check a mechanism's (or rotation's) output: the input's shape and finite, or nothing is released.

    Every computation here is row-wise, so a non-finite output row is the row whose magnitude was
    beyond float32 arithmetic (about 1e19 and up for a norm): the error names it, never its values.

    Raises:
        ProtectionError: Another shape, or a non-finite row (named).
    """
    if out.shape != shape:
        raise ProtectionError(f"{by} returned shape {out.shape} for {name} of shape {shape}; nothing was released")
    finite = np.isfinite(out).all(axis=1) if out.ndim == 2 else np.isfinite(out)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ProtectionError(
            f"{by} cannot protect {bad.size} row(s) of {name}, first at row {int(bad[0])}: their magnitude is "
            "beyond what float32 arithmetic can take (rescale the input); nothing was released"
        )
    return out
