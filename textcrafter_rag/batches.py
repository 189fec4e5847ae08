"""Protect table-shaped batches: a dict of numpy columns, a ``pyarrow.Table`` or a pandas DataFrame.

One place converts an embedding column (a 2-D array, a column of 1-D arrays, an Arrow
list / fixed-size-list column or Ray's Arrow tensor column) to an ``(n, D)`` matrix and back.
The Ray Data callable (:mod:`textcrafter_rag.ray_data`) uses it, so a batch is protected the
same way whatever carries it. Other columns (ids, texts, metadata) pass through untouched.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import numpy as np

from .errors import InvalidTypeError, MissingColumnError
from .validation import check_vectors

__all__ = ["column_to_matrix", "matrix_to_arrow", "protect_batch"]


def _is_arrow(obj: Any) -> bool:
    """A ``pyarrow`` Table, Array or ChunkedArray (extension arrays included); never imports pyarrow."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(obj, (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray))


def column_to_matrix(col: Any, *, name: str = "embedding") -> np.ndarray:
    """An embedding column as an ``(n, D)`` array (not yet validated: :class:`Protector` does that).

    Args:
        col: A 2-D numpy array, a 1-D object array / list of equal-length vectors, a pandas
            Series of vectors, or a ``pyarrow`` (chunked) list / large-list / fixed-size-list
            array or Ray tensor-extension array.
        name: The column's name, for error messages.

    Raises:
        TypeError: Nulls, ragged rows or a type that is not a column of vectors.
    """
    if _is_arrow(col):
        import pyarrow as pa

        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if col.null_count:
            raise InvalidTypeError(f"column {name!r} has {col.null_count} null row(s); nothing was protected")
        if pa.types.is_fixed_size_list(col.type):
            d = col.type.list_size
            return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), d)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            lengths = col.value_lengths().to_numpy(zero_copy_only=False)
            if len(col) and (lengths != lengths[0]).any():
                raise InvalidTypeError(f"column {name!r} has rows of different lengths; nothing was protected")
            d = int(lengths[0]) if len(col) else 0
            return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), d)
        col = col.to_numpy(zero_copy_only=False)  # Ray's tensor extension types and the like
    if hasattr(col, "to_numpy") and not isinstance(col, np.ndarray):  # pandas Series
        col = col.to_numpy()
    arr = np.asarray(col) if not isinstance(col, np.ndarray) else col
    if arr.dtype == object:
        rows = list(arr.reshape(-1)) if arr.ndim == 1 else None
        if rows is None:
            raise InvalidTypeError(f"column {name!r} is not a column of vectors; nothing was protected")
        if any(r is None for r in rows):
            raise InvalidTypeError(f"column {name!r} has null row(s); nothing was protected")
        try:
            arr = np.stack([np.asarray(r) for r in rows]) if rows else np.empty((0, 0), dtype=np.float32)
        except ValueError:
            raise InvalidTypeError(f"column {name!r} has rows of different lengths; nothing was protected") from None
    return arr


def matrix_to_arrow(x: np.ndarray, *, like: Any = None) -> Any:
    """An ``(n, D)`` array as a float32 ``pyarrow`` array.

    Args:
        x: The vectors.
        like: The input column, whose kind the output keeps: a Ray tensor column stays a tensor
            column, a list column a ``list<float>`` column; anything else (and ``None``) gives a
            ``fixed_size_list<float>[D]`` column.
    """
    import pyarrow as pa

    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    flat = pa.array(x.reshape(-1))
    kind = getattr(like, "type", None)
    if isinstance(kind, pa.ExtensionType):
        from_numpy = getattr(kind.__arrow_ext_class__(), "from_numpy", None)  # Ray's ArrowTensorArray
        if from_numpy is not None:
            with contextlib.suppress(Exception):  # an unknown extension: fall back to a plain list column
                return from_numpy(x)
    if kind is not None and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        offsets = np.arange(n + 1, dtype=np.int64 if pa.types.is_large_list(kind) else np.int32) * d
        cls = pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray
        return cls.from_arrays(pa.array(offsets), flat)
    return pa.FixedSizeListArray.from_arrays(flat, d)


def _column_names(batch: Any) -> list[str]:
    if _is_arrow(batch):
        return list(batch.column_names)
    if hasattr(batch, "keys"):
        return [str(k) for k in batch]  # dict keys, DataFrame columns
    raise InvalidTypeError(
        f"a batch must be a dict of numpy columns, a pyarrow.Table or a pandas.DataFrame, got {type(batch).__name__}"
    )


def protect_batch(
    protector: Any,
    batch: Any,
    *,
    column: str = "embedding",
    output_column: str | None = None,
    text_column: str | None = None,
) -> Any:
    """Protect one batch; returns a new batch of the same kind with ``output_column`` set.

    The input batch is not modified, and either every row is protected or an error is raised:
    a partial batch is never returned. An empty batch gives an empty ``(0, D)`` output column.

    Args:
        protector: A :class:`~textcrafter_rag.protector.Protector`.
        batch: ``dict[str, np.ndarray]`` (Ray's ``batch_format="numpy"``), a ``pyarrow.Table``
            or a ``pandas.DataFrame``.
        column: The embedding column. When it is absent and ``text_column`` is given, the texts
            are embedded with the protector's base encoder first.
        output_column: Where the protected vectors go; default ``column`` (replaced in place, so the
            clean vectors do not travel on).
        text_column: A text column to embed when the batch has no embedding column.

    Raises:
        KeyError: Neither the embedding column nor the text column is in the batch.
        TypeError, ValueError: The column is not a valid batch of vectors (nulls, ragged rows,
            NaN/Inf, wrong dimension; see :func:`~textcrafter_rag.validation.check_vectors`), or a
            text is not a non-empty string.
    """
    out_col = output_column or column
    names = _column_names(batch)
    source: Any = None
    if column in names:
        source = batch[column]
        x = column_to_matrix(source, name=column)
        if x.ndim == 2 and x.shape[0] == 0:
            vectors = np.empty((0, protector.dimension or x.shape[1]), dtype=np.float32)
        else:
            x = check_vectors(x, dim=protector.dimension, name=f"column {column!r}")
            vectors = protector.protect(x)
    elif text_column is not None and text_column in names:
        texts = batch[text_column]
        texts = texts.to_pylist() if _is_arrow(texts) else list(texts)  # np.str_ is a str
        vectors = protector.embed_documents(texts)
    else:
        wanted = repr(column) if text_column is None else f"{column!r} or {text_column!r}"
        raise MissingColumnError(f"batch has no column {wanted}; its columns are {names}")
    if _is_arrow(batch):
        like = source if source is not None else (batch[out_col] if out_col in names else None)
        arr = matrix_to_arrow(vectors, like=like)
        if out_col in names:
            return batch.set_column(names.index(out_col), out_col, arr)
        return batch.append_column(out_col, arr)
    if hasattr(batch, "assign"):  # pandas
        return batch.assign(**{out_col: list(vectors)})
    result = dict(batch)
    result[out_col] = vectors
    return result
