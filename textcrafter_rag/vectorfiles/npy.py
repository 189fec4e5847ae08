"""``.npy`` files: an ``(n, D)`` float array, read and written through memory maps.

The pages of a map behind the cursor are flushed and dropped from the process
(``madvise(MADV_DONTNEED)``); otherwise a memory-mapped file would count in full towards the
resident set while it is streamed.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import InvalidInputError, VectorFileError
from .core import Chunk, FormatWriter, ReadOptions, Rows, VectorReader, WriteOptions, check_indices

__all__ = ["NpyReader", "NpyWriter", "Pages"]


class Pages:
    """Flush and drop the pages of a memory-mapped array behind a cursor from this process.

    Touched pages of a file mapping stay in the resident set until the kernel needs the memory,
    so a streamed 1.5 GB ``.npy`` would otherwise show 1.5 GB of RSS. ``MADV_DONTNEED`` unmaps
    them from the process; the data stays in the page cache (and, once flushed, on disk).
    A no-op where ``madvise`` is unavailable.
    """

    def __init__(self, arr: np.ndarray) -> None:
        mm = getattr(arr, "_mmap", None)  # np.memmap's mapping: [aligned file offset, offset + nbytes)
        ok = isinstance(mm, mmap.mmap) and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")
        self._mm: mmap.mmap | None = mm if ok else None
        self._delta = len(mm) - arr.nbytes if self._mm is not None else 0  # where the data starts in the map
        self._done = 0

    def release(self, upto: int | None = None, *, flush: bool = False) -> None:
        """Drop pages before data byte ``upto`` (``None``: the whole map), flushing them first if asked."""
        if self._mm is None:
            return
        size = len(self._mm)
        end = size if upto is None else min(size, self._delta + upto)
        if end < size:
            end -= end % mmap.PAGESIZE
        if end <= self._done:
            return
        if flush:
            self._mm.flush(self._done, end - self._done)
        self._mm.madvise(mmap.MADV_DONTNEED, self._done, end - self._done)
        self._done = end

    def reset(self) -> None:
        """Start over (for arrays whose rows are not contiguous, e.g. Fortran order)."""
        self._done = 0


class NpyReader(VectorReader):
    """Rows of a memory-mapped ``(n, D)`` ``.npy`` file."""

    def __init__(self, path: Path, options: ReadOptions) -> None:
        super().__init__(path, options)
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise VectorFileError(f"{path} is not a readable .npy array: {exc}") from exc
        if arr.ndim != 2:
            raise VectorFileError(f"{path} must hold a 2-D (n, D) array, got {arr.ndim}-D of shape {arr.shape}")
        self._arr: np.ndarray | None = arr
        self.n_rows, self.dim = int(arr.shape[0]), int(arr.shape[1])
        self.total = self.n_rows

    def _array(self) -> np.ndarray:
        if self._arr is None:
            raise VectorFileError(f"{self.path} was closed")
        return self._arr

    def __iter__(self) -> Iterator[Chunk]:
        arr, size = self._array(), self.options.chunk_size
        n_rows = int(arr.shape[0])
        pages = Pages(arr) if isinstance(arr, np.memmap) else None
        c_order = arr.flags.c_contiguous
        row_bytes = arr.dtype.itemsize * int(arr.shape[1])
        for k, start in enumerate(range(0, n_rows, size)):
            stop = min(start + size, n_rows)
            x = np.array(arr[start:stop])  # an in-memory copy: the mapped pages can go
            if pages is not None:
                if c_order:
                    pages.release(stop * row_bytes)
                else:  # a row chunk of a Fortran-order array touches pages all over the file
                    pages.release()
                    pages.reset()
            yield Chunk(index=k, start=start, n=stop - start, consumed=stop - start, vectors=x)

    def take(self, indices: np.ndarray, *, with_columns: bool = False, progress: bool = False) -> Rows:
        """The rows ``indices``: a fancy index into the map reads only their pages. ``.npy`` has no other columns."""
        idx = check_indices(indices, self.n_rows, self.path)
        return Rows(vectors=np.asarray(self._array()[idx]))

    def close(self) -> None:
        self._arr = None


class NpyWriter(FormatWriter):
    """An ``(n, D)`` float32 ``.npy`` of known ``n`` (``options.n_rows``), written through a memory map."""

    def __init__(self, path: Path, options: WriteOptions) -> None:
        super().__init__(path, options)
        if options.n_rows is None:
            raise InvalidInputError(".npy output needs the number of rows up front (WriteOptions.n_rows)")
        self.n_rows = options.n_rows
        self._out: np.memmap | None = None
        self._pages: Pages | None = None

    def write(self, chunk: Chunk, y: np.ndarray) -> None:
        if self._out is None:
            self._out = np.lib.format.open_memmap(
                self.path, mode="w+", dtype=np.float32, shape=(self.n_rows, y.shape[1])
            )
            self._pages = Pages(self._out)
        if self.rows + y.shape[0] > self.n_rows:
            raise VectorFileError(f"the input has more rows than the {self.n_rows} counted when it was opened")
        self._out[self.rows : self.rows + y.shape[0]] = y
        self.rows += y.shape[0]
        assert self._pages is not None
        self._pages.release(self.rows * y.shape[1] * 4, flush=True)

    def close(self) -> None:
        if self._out is None:
            return
        if self.rows != self.n_rows:
            raise VectorFileError(f"the input has {self.rows} rows, not the {self.n_rows} counted when it was opened")
        self._out.flush()
        self._out = self._pages = None  # unmaps the file

    def abort(self) -> None:
        self._out = self._pages = None
