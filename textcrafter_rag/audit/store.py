"""Read a sample of a vector store (``.npy``, ``.parquet``, ``.jsonl``) and the texts of its first rows.

Only the sampled rows are materialised: ``.npy`` stores are memory-mapped, Parquet stores are read
one row group (and one column) at a time, and JSONL stores are streamed line by line. Every
problem with the input raises :class:`AuditInputError` (a ``ValueError``, so the CLI exits with
code 2) with a message that names the file and the problem, never the vector values or texts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["AuditInputError", "StoreSample", "store_rows", "read_rows", "read_texts", "sample_indices", "load_sample"]

FORMATS = (".npy", ".parquet", ".jsonl")


class AuditInputError(ValueError):
    """Bad audit input: a missing or unreadable file, a wrong shape, or texts that do not match the store."""


@dataclass
class StoreSample:
    """The sampled rows of a store.

    Attributes:
        vectors: ``(n, D)`` float32 vectors, in store order.
        indices: Their row numbers in the store (sorted).
        texts: The texts of those rows, or ``None`` without a texts file.
        n_store: Rows in the store.
        n_texts: Rows in the texts file (0 without one).
    """

    vectors: np.ndarray
    indices: np.ndarray
    texts: list[str] | None
    n_store: int
    n_texts: int


def _check_file(path: Path, what: str) -> None:
    if not path.exists():
        raise AuditInputError(f"{what} {path} does not exist")
    if not path.is_file():
        raise AuditInputError(f"{what} {path} is not a file")


def _jsonl_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line_number, parsed_object)`` for every non-blank line."""
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError:
                raise AuditInputError(f"{path}:{i} is not valid JSON") from None


def store_rows(path: str | os.PathLike[str], *, column: str = "embedding") -> int:
    """Number of rows in a store (reads no vectors for ``.npy`` and ``.parquet``)."""
    p = Path(path)
    _check_file(p, "store")
    if p.suffix == ".npy":
        arr = _open_npy(p)
        return int(arr.shape[0])
    if p.suffix == ".parquet":
        pf = _open_parquet(p, column)
        return int(pf.metadata.num_rows)
    if p.suffix == ".jsonl":
        return sum(1 for _ in _jsonl_lines(p))
    raise AuditInputError(f"store {p} must be .npy (an (n, D) array), .parquet or .jsonl (an embedding column)")


def _open_npy(p: Path) -> np.ndarray:
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise AuditInputError(f"{p} is not a readable .npy array ({exc})") from None
    if arr.ndim != 2:
        raise AuditInputError(f"store {p} must hold a 2-D (n, D) array, got shape {arr.shape}")
    return arr


def _open_parquet(p: Path, column: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AuditInputError("reading .parquet stores needs pyarrow: pip install 'textcrafter-rag[parquet]'") from None
    try:
        pf = pq.ParquetFile(p)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise AuditInputError(f"{p} is not a readable Parquet file ({type(exc).__name__})") from None
    if column not in pf.schema_arrow.names:
        raise AuditInputError(f"store {p} has no column {column!r}; its columns are {pf.schema_arrow.names} "
                              "(choose one with --column)")
    return pf


def read_rows(path: str | os.PathLike[str], indices: np.ndarray, *, column: str = "embedding",
              progress: bool = True) -> np.ndarray:
    """The store rows ``indices`` (sorted, unique) as a float32 ``(len(indices), D)`` array."""
    from tqdm.auto import tqdm

    from ..batches import column_to_matrix

    p = Path(path)
    idx = np.asarray(indices, dtype=np.int64)
    if p.suffix == ".npy":
        out = np.asarray(_open_npy(p)[idx])
    elif p.suffix == ".parquet":
        pf = _open_parquet(p, column)
        parts, start = [], 0
        for g in tqdm(range(pf.num_row_groups), desc="read store", disable=not progress or pf.num_row_groups < 4):
            n = pf.metadata.row_group(g).num_rows
            want = idx[(idx >= start) & (idx < start + n)] - start
            if len(want):
                col = pf.read_row_group(g, columns=[column]).column(column)
                parts.append(_as_matrix(column_to_matrix, col.take(want), column, p))
            start += n
        out = np.concatenate(parts, 0) if parts else np.empty((0, 0), np.float32)
    elif p.suffix == ".jsonl":
        wanted = set(idx.tolist())
        rows = []
        lines = tqdm(_jsonl_lines(p), desc="read store", disable=not progress, mininterval=2)
        for r, (i, obj) in enumerate(lines):
            if r in wanted:
                if not isinstance(obj, dict) or column not in obj:
                    raise AuditInputError(f"{p}:{i} has no {column!r} field (choose one with --column)")
                rows.append(obj[column])
        out = _as_matrix(column_to_matrix, np.asarray(rows + [None], dtype=object)[:-1], column, p)
    else:
        raise AuditInputError(f"store {p} must be .npy, .parquet or .jsonl")
    if out.ndim != 2 or out.dtype.kind != "f":
        raise AuditInputError(f"store {p} does not hold float vectors (got dtype {out.dtype}, shape {out.shape})")
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise AuditInputError(f"store {p} has NaN or Inf in sampled row {int(idx[bad])}")
    return np.ascontiguousarray(out, dtype=np.float32)


def _as_matrix(convert: Any, col: Any, column: str, p: Path) -> np.ndarray:
    try:
        return np.asarray(convert(col, name=column))
    except (TypeError, ValueError) as exc:
        raise AuditInputError(f"store {p}: {exc}") from None


def read_texts(path: str | os.PathLike[str], *, field: str = "text") -> list[str]:
    """The ``field`` of every line of a JSONL file (a bare JSON string per line also works)."""
    p = Path(path)
    _check_file(p, "texts file")
    if p.suffix != ".jsonl":
        raise AuditInputError(f"texts file {p} must be .jsonl with a {field!r} field per line")
    texts = []
    for i, obj in _jsonl_lines(p):
        text = obj.get(field) if isinstance(obj, dict) else obj
        if not isinstance(text, str) or not text.strip():
            raise AuditInputError(f"{p}:{i} has no non-empty string {field!r} field")
        texts.append(text)
    if not texts:
        raise AuditInputError(f"texts file {p} is empty")
    return texts


def sample_indices(n_rows: int, n: int, *, seed: int = 0) -> np.ndarray:
    """``min(n, n_rows)`` sorted row numbers drawn without replacement (all rows when ``n >= n_rows``)."""
    if n <= 0:
        raise AuditInputError(f"the sample size must be positive, got {n}")
    if n >= n_rows:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng(seed).choice(n_rows, size=n, replace=False))


def load_sample(
    vectors: str | os.PathLike[str], *, texts: str | os.PathLike[str] | None = None, column: str = "embedding",
    n: int = 200, seed: int = 0, progress: bool = True,
) -> StoreSample:
    """Sample ``n`` rows of a store; with ``texts`` (aligned with the store's first rows) only from those rows."""
    n_store = store_rows(vectors, column=column)
    if n_store == 0:
        raise AuditInputError(f"store {vectors} has no rows")
    all_texts = read_texts(texts) if texts is not None else None
    if all_texts is not None and len(all_texts) > n_store:
        raise AuditInputError(f"texts file {texts} has {len(all_texts)} rows but the store only {n_store}; "
                              "row i of the texts must belong to row i of the store")
    pool = len(all_texts) if all_texts is not None else n_store
    idx = sample_indices(pool, n, seed=seed)
    x = read_rows(vectors, idx, column=column, progress=progress)
    if x.shape[0] != len(idx):
        raise AuditInputError(f"read {x.shape[0]} rows from {vectors}, expected {len(idx)}")
    sample_texts = [all_texts[i] for i in idx] if all_texts is not None else None
    return StoreSample(vectors=x, indices=idx, texts=sample_texts, n_store=n_store,
                       n_texts=len(all_texts) if all_texts is not None else 0)
