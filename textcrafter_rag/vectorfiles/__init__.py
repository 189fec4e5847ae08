"""Read and write vector files: ``.npy``, ``.parquet`` and ``.jsonl``, in bounded memory.

The one reading and writing layer of the package: ``textcrafter protect``
(:mod:`textcrafter_rag.streaming`) streams files through it chunk by chunk, and ``textcrafter
audit`` (:mod:`textcrafter_rag.audit.store`) reads a random sample of rows and a texts file
through it. The format follows the suffix, in any case (``.NPY`` is ``.npy``).

* ``.npy``: an ``(n, D)`` float array, read memory-mapped; written with
  :func:`numpy.lib.format.open_memmap`. Pages behind the cursor are dropped from the process.
* ``.parquet`` (needs ``pyarrow``): an embedding column (list or fixed-size list of floats) or a
  text column; every other column passes through. Read page-wise, one row group at a time.
* ``.jsonl``: one JSON object per line with an embedding field (a list of numbers) or a string
  text field (a bare JSON string counts as a text); the other fields pass through.

Every problem with a file raises :class:`~textcrafter_rag.errors.VectorFileError` (a
``ValueError``) naming the file and the chunk, row (0-based) or line (1-based), never the values.
"""

from __future__ import annotations

from ..errors import VectorFileError
from .access import AtomicWriter, count_rows, open_reader, read_rows, read_texts
from .core import (
    FORMATS,
    Chunk,
    FormatWriter,
    ReadOptions,
    Rows,
    VectorFileNotFoundError,
    VectorReader,
    WriteOptions,
    check_file,
    file_format,
    raising,
)

__all__ = [
    "FORMATS",
    "AtomicWriter",
    "Chunk",
    "FormatWriter",
    "ReadOptions",
    "Rows",
    "VectorFileError",
    "VectorFileNotFoundError",
    "VectorReader",
    "WriteOptions",
    "check_file",
    "count_rows",
    "file_format",
    "open_reader",
    "raising",
    "read_rows",
    "read_texts",
]
