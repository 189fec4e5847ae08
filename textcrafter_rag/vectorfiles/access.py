"""Open a vector file by its suffix: readers, an atomic writer, row counts, random rows and texts.

The entry points the commands use; the formats live in :mod:`.npy`, :mod:`.parquet` and :mod:`.jsonl`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ..errors import VectorFileError
from .core import Chunk, FormatWriter, ReadOptions, Rows, VectorReader, WriteOptions, file_format, pyarrow_modules
from .jsonl import JsonlReader, JsonlWriter, iter_records, text_of
from .npy import NpyReader, NpyWriter
from .parquet import ParquetReader, ParquetWriter

__all__ = ["AtomicWriter", "count_rows", "open_reader", "read_rows", "read_texts"]

_READERS: dict[str, type[VectorReader]] = {".npy": NpyReader, ".parquet": ParquetReader, ".jsonl": JsonlReader}
_WRITERS: dict[str, type[FormatWriter]] = {".npy": NpyWriter, ".parquet": ParquetWriter, ".jsonl": JsonlWriter}


def open_reader(path: str | os.PathLike[str], options: ReadOptions | None = None) -> VectorReader:
    """A reader for ``path``, chosen by its suffix (any case). Use it as a context manager.

    Raises:
        VectorFileError: An unsupported suffix, an unreadable file, or no embedding (nor text) column.
    """
    p = Path(path)
    return _READERS[file_format(p)](p, options or ReadOptions())


class AtomicWriter:
    """Write a vector file to a temporary sibling and rename it into place only on success.

    Used as a context manager: leaving the block normally closes the file and renames it onto
    ``path`` (atomically, on one file system); leaving it by any exception (Ctrl-C included)
    removes the temporary file, so a partial file never appears at ``path`` and an existing one
    is left untouched.
    """

    def __init__(self, path: str | os.PathLike[str], options: WriteOptions) -> None:
        self.path = Path(path)
        fmt = file_format(self.path, role="output")
        self.temp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.partial")
        self._inner = _WRITERS[fmt](self.temp, options)

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return self._inner.rows

    def write(self, chunk: Chunk, y: np.ndarray) -> None:
        """Append the vectors ``y`` of ``chunk``."""
        self._inner.write(chunk, y)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            try:
                self._inner.close()
                os.replace(self.temp, self.path)
                return
            except BaseException:
                self._inner.abort()
                self.temp.unlink(missing_ok=True)
                raise
        self._inner.abort()
        self.temp.unlink(missing_ok=True)


def count_rows(path: str | os.PathLike[str], *, column: str = "embedding") -> int:
    """Rows of a vector file with an embedding ``column``, reading no vectors (``.jsonl``: lines, not parsed)."""
    with open_reader(path, ReadOptions(column=column, text_column=None)) as reader:
        return reader.count_rows()


def read_rows(
    path: str | os.PathLike[str],
    indices: Any,
    *,
    column: str = "embedding",
    with_columns: bool = False,
    progress: bool = False,
) -> Rows:
    """The vectors of rows ``indices`` (sorted, unique) of a vector file, reading only what they need.

    Args:
        path: A ``.npy``, ``.parquet`` or ``.jsonl`` file.
        indices: 0-based row numbers (``.jsonl``: non-blank lines).
        column: The embedding column or field.
        with_columns: Also return, for the same rows, every other column or field that may hold
            text (to check what travels beside the vectors).
        progress: Show a progress bar.
    """
    with open_reader(path, ReadOptions(column=column, text_column=None)) as reader:
        return reader.take(np.asarray(indices), with_columns=with_columns, progress=progress)


def read_texts(path: str | os.PathLike[str], *, field: str = "text") -> list[str]:
    """Every text of a ``.jsonl`` (string ``field`` or a bare JSON string per line) or ``.parquet`` column.

    Raises:
        VectorFileError: A row without a non-empty string, naming its line (``.jsonl``) or row
            (``.parquet``); a ``.npy`` file, which holds no texts.
    """
    p = Path(path)
    fmt = file_format(p)
    texts: list[str] = []
    if fmt == ".jsonl":
        for line_no, obj, _ in iter_records(p):
            text = text_of(obj, field)
            if text is None or not text.strip():
                raise VectorFileError(f"{p}:{line_no} has no non-empty string {field!r} field")
            texts.append(text)
    elif fmt == ".parquet":
        pa, pq = pyarrow_modules()
        try:
            pf = pq.ParquetFile(p)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise VectorFileError(f"{p} is not a readable .parquet file: {exc}") from exc
        try:
            if field not in pf.schema_arrow.names:
                raise VectorFileError(f"{p} has no column {field!r}; its columns are {pf.schema_arrow.names}")
            for batch in pf.iter_batches(columns=[field], use_threads=False):
                for text in batch.column(0).to_pylist():
                    if not isinstance(text, str) or not text.strip():
                        raise VectorFileError(f"{p}: column {field!r} is not a non-empty string at row {len(texts)}")
                    texts.append(text)
        finally:
            pf.close()
    else:
        raise VectorFileError(f"{p} holds only vectors; texts come from a .jsonl or .parquet file")
    return texts
