"""What the format readers and writers share: suffixes, options, chunks, errors and the reader base.

Kept apart from the formats so that each format module stays small and imports only this one.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInputError, VectorFileError

__all__ = [
    "FORMATS",
    "Chunk",
    "FormatWriter",
    "ReadOptions",
    "Rows",
    "VectorFileNotFoundError",
    "VectorReader",
    "WriteOptions",
    "check_file",
    "check_indices",
    "file_format",
    "raising",
]

#: The suffixes (lower case) of the formats read and written here.
FORMATS: tuple[str, ...] = (".npy", ".parquet", ".jsonl")


class VectorFileNotFoundError(VectorFileError, FileNotFoundError):
    """A vector file does not exist (also a ``FileNotFoundError``, so ``except OSError`` handlers see it)."""


def file_format(path: str | os.PathLike[str], *, role: str = "input") -> str:
    """The format of ``path`` from its suffix, lower-cased (``.NPY`` is ``.npy``).

    Raises:
        VectorFileError: The suffix is not one of :data:`FORMATS`; ``role`` names the file in the message.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise VectorFileError(
            f"unsupported {role} file type {p.suffix or '(none)'!r} for {p}: use .npy, .parquet or .jsonl"
        )
    return suffix


def check_file(path: str | os.PathLike[str], *, role: str = "input file") -> Path:
    """``path`` as a :class:`~pathlib.Path` once it is known to be an existing regular file."""
    p = Path(path)
    if not p.exists():
        raise VectorFileNotFoundError(f"{role} {p} does not exist")
    if not p.is_file():
        raise VectorFileError(f"{role} {p} is not a file")
    return p


@contextlib.contextmanager
def raising(cls: type[VectorFileError]) -> Iterator[None]:
    """Re-raise every :class:`VectorFileError` of the block as ``cls``, same message, original chained.

    Each command keeps its own error class (``StreamError``, ``AuditInputError``) while the reading
    code stays in one place. Works as a ``with`` block and as a function decorator.
    """
    try:
        yield
    except VectorFileError as exc:
        if isinstance(exc, cls):
            raise
        raise cls(str(exc)) from exc


def pyarrow_modules() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use: pyarrow is an optional dependency."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise VectorFileError(".parquet files need pyarrow: pip install 'textcrafter-rag[parquet]'") from None
    return pa, pq


@dataclass(frozen=True)
class ReadOptions:
    """How to read a vector file.

    Attributes:
        column: The embedding column (``.parquet``) or field (``.jsonl``); ``.npy`` holds only vectors.
        text_column: A text column or field to read when there is no embedding column (the caller
            embeds it); ``None`` requires the embedding column. In ``.jsonl`` a bare JSON string
            line also counts as a text then.
        chunk_size: Rows per :class:`Chunk`; bounds peak memory.
        vectors_only: Read only the vector (or text) column, not the pass-through ones.
    """

    column: str = "embedding"
    text_column: str | None = "text"
    chunk_size: int = 4096
    vectors_only: bool = False

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise InvalidInputError("chunk_size must be >= 1")


@dataclass(frozen=True)
class WriteOptions:
    """How to write a vector file.

    Attributes:
        output_column: Where the vectors go (``.parquet`` column, ``.jsonl`` field).
        column: The input's embedding column; dropped from the pass-through columns when ``drop_clean``.
        text_column: The field a bare-string ``.jsonl`` input record is written under.
        drop_clean: Drop ``column`` so that the clean vectors do not travel on.
        n_rows: Rows to expect; required for ``.npy``, whose header states the shape up front.
    """

    output_column: str = "embedding"
    column: str = "embedding"
    text_column: str = "text"
    drop_clean: bool = False
    n_rows: int | None = None


@dataclass
class Chunk:
    """One chunk of input rows.

    Exactly one of ``vectors`` and ``texts`` is set. ``table`` (parquet) or ``records`` (jsonl)
    carry the pass-through columns; ``lines`` holds the 1-based line of each jsonl record.
    """

    index: int
    start: int
    n: int
    consumed: int  # progress units (rows, or bytes for jsonl)
    vectors: np.ndarray | None = None
    texts: list[str] | None = None
    table: Any = None
    records: list[Any] | None = None
    lines: list[int] | None = None

    def where(self) -> str:
        """``chunk 3 (rows 12-17)`` or ``chunk 3 (lines 13-20)``."""
        if self.lines is not None:
            return f"chunk {self.index} (lines {self.lines[0]}-{self.lines[-1]})"
        return f"chunk {self.index} (rows {self.start}-{self.start + self.n - 1})"

    def row_name(self, i: int) -> str:
        """The absolute name of row ``i`` of this chunk: ``row 9000`` or ``line 17``."""
        return f"line {self.lines[i]}" if self.lines is not None else f"row {self.start + i}"


@dataclass
class Rows:
    """Rows picked by :meth:`VectorReader.take`.

    Attributes:
        vectors: ``(k, D)`` vectors of the picked rows, in the given order, in the file's dtype.
        columns: With ``with_columns``: for every other column or field that may hold text, its
            values on the picked rows (``None`` where a ``.jsonl`` record lacks the field).
    """

    vectors: np.ndarray
    columns: dict[str, list[Any]] = field(default_factory=dict)


class VectorReader(ABC):
    """Base of the format readers: chunked iteration, a row count and random row access.

    Attributes:
        path: The file.
        options: The :class:`ReadOptions` it was opened with.
        unit: What ``total`` counts for a progress bar: ``"vec"`` rows or ``"B"`` bytes.
        total: Progress units in the file (rows, or bytes for ``.jsonl``).
        n_rows: Rows, where known without reading the file (``None`` for ``.jsonl``; see :meth:`count_rows`).
        dim: Vector dimension, where known before reading (else ``None``).
        embeds: Whether the file holds texts to embed instead of vectors.
    """

    unit = "vec"

    def __init__(self, path: Path, options: ReadOptions) -> None:
        self.path, self.options = path, options
        self.total: int | None = None
        self.n_rows: int | None = None
        self.dim: int | None = None
        self.embeds = False

    @abstractmethod
    def __iter__(self) -> Iterator[Chunk]:
        """The file's rows, chunk by chunk."""

    def count_rows(self) -> int:
        """Number of rows (for ``.jsonl``: non-blank lines, counted without parsing them)."""
        assert self.n_rows is not None
        return self.n_rows

    @abstractmethod
    def take(self, indices: np.ndarray, *, with_columns: bool = False, progress: bool = False) -> Rows:
        """The vectors of rows ``indices`` (sorted, unique, 0-based), reading only what they need."""

    def close(self) -> None:  # noqa: B027 -- a no-op unless the format needs one
        """Release the file."""

    def __enter__(self) -> VectorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FormatWriter(ABC):
    """Base of the format writers: :meth:`write` chunk by chunk, then :meth:`close`, or :meth:`abort` on error."""

    def __init__(self, path: Path, options: WriteOptions) -> None:
        self.path, self.options = path, options
        self.rows = 0

    @abstractmethod
    def write(self, chunk: Chunk, y: np.ndarray) -> None:
        """Append the vectors ``y`` of ``chunk`` (with its pass-through columns, where the format keeps them)."""

    def close(self) -> None:  # noqa: B027 -- a no-op unless the format needs one
        """Finish the file; raises if it is incomplete."""

    def abort(self) -> None:  # noqa: B027 -- a no-op unless the format needs one
        """Release the file after an error without raising a second one (the caller removes it)."""


def check_indices(indices: Any, n_rows: int | None, path: Path) -> np.ndarray:
    """``indices`` as sorted, unique, in-range int64 row numbers (``n_rows`` ``None``: not range-checked)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (np.any(idx < 0) or np.any(np.diff(idx) <= 0)):
        raise VectorFileError(f"{path}: row numbers to read must be sorted, unique and >= 0")
    if idx.size and n_rows is not None and idx[-1] >= n_rows:
        raise VectorFileError(f"{path}: row {int(idx[-1])} is past the end ({n_rows} rows)")
    return idx
