"""Protect big files in bounded memory: ``.npy``, ``.parquet`` and ``.jsonl``, chunk by chunk.

:func:`protect_file` reads an input file ``chunk_size`` rows at a time, protects each chunk with a
:class:`~textcrafter_rag.protector.Protector` and writes it out before reading the next, so peak
memory depends on the chunk size, not on the file size (``benchmarks/streaming_memory.py``
measures it). ``textcrafter protect`` is a thin wrapper around it.

* ``.npy``: an ``(n, D)`` float array, read memory-mapped; written with
  :func:`numpy.lib.format.open_memmap`. The pages of both maps behind the cursor are flushed and
  dropped from the process (``madvise(MADV_DONTNEED)``), otherwise a memory-mapped file would count
  in full towards the resident set.
* ``.parquet`` (needs ``pyarrow``): an embedding column (list or fixed-size list of floats), or a
  text column that is embedded with the encoder; every other column (ids, texts, metadata)
  passes through.
* ``.jsonl``: one JSON object per line with an embedding field (a list of numbers) or a string
  ``text`` field (a bare JSON string counts as a text); the other fields pass through.

The output format follows the output suffix: the input's own format, or ``.npy`` (the protected
vectors only) from any input. When the output column differs from the embedding column, the
clean embedding column is dropped: clean vectors never travel on. The output is written to a
temporary sibling and renamed into place only after the last chunk succeeded, so an error (or
Ctrl-C) never leaves a partial file at the output path. Errors name the file, the chunk and the
row (0-based) or line (1-based), never the values.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .batches import column_to_matrix, matrix_to_arrow

__all__ = ["SUPPORTED_CONVERSIONS", "StreamError", "StreamReport", "protect_file"]

#: (input suffix, output suffix) pairs :func:`protect_file` accepts.
SUPPORTED_CONVERSIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (".npy", ".npy"), (".npy", ".parquet"), (".npy", ".jsonl"),
        (".parquet", ".parquet"), (".parquet", ".npy"),
        (".jsonl", ".jsonl"), (".jsonl", ".npy"),
    }
)
_FORMATS = (".npy", ".parquet", ".jsonl")


class StreamError(ValueError):
    """A file could not be protected. The message names the file and the chunk, row or line."""


@dataclass(frozen=True)
class StreamReport:
    """What :func:`protect_file` did.

    Attributes:
        input: The input path.
        output: The output path (complete: it exists only once every chunk succeeded).
        rows: Number of vectors protected.
        dim: Their dimension.
        chunks: Number of chunks processed.
        embedded: Whether texts were embedded (else precomputed vectors were protected).
        seconds: Wall time of the streaming loop (reading, embedding, protecting, writing).
        mechanism: ``repr`` of the protecting mechanism.
    """

    input: Path
    output: Path
    rows: int
    dim: int
    chunks: int
    embedded: bool
    seconds: float
    mechanism: str

    @property
    def vectors_per_s(self) -> float:
        """Throughput of the streaming loop."""
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class _Chunk:
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


# --------------------------------------------------------------------------- memory maps
class _Pages:
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


# --------------------------------------------------------------------------- readers
class _NpyReader:
    """Rows of a memory-mapped ``(n, D)`` ``.npy`` file."""

    unit = "vec"

    def __init__(self, path: Path, *, chunk_size: int) -> None:
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise StreamError(f"{path} is not a readable .npy array: {exc}") from exc
        if arr.ndim != 2:
            raise StreamError(f"{path} must hold a 2-D array (n, D), got {arr.ndim}-D")
        self.path, self.chunk_size, self._arr = path, chunk_size, arr
        self.n_rows, self.dim = int(arr.shape[0]), int(arr.shape[1])
        self.total: int | None = self.n_rows
        self.embeds = False

    def __iter__(self) -> Iterator[_Chunk]:
        arr = self._arr
        pages = _Pages(arr) if isinstance(arr, np.memmap) else None
        c_order = arr.flags.c_contiguous
        row_bytes = arr.dtype.itemsize * self.dim
        for k, start in enumerate(range(0, self.n_rows, self.chunk_size)):
            stop = min(start + self.chunk_size, self.n_rows)
            x = np.array(arr[start:stop])  # an in-memory copy: the mapped pages can go
            if pages is not None:
                if c_order:
                    pages.release(stop * row_bytes)
                else:  # a row chunk of a Fortran-order array touches pages all over the file
                    pages.release()
                    pages.reset()
            yield _Chunk(index=k, start=start, n=stop - start, consumed=stop - start, vectors=x)

    def close(self) -> None:
        self._arr = None


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StreamError(".parquet files need pyarrow: pip install 'textcrafter-rag[parquet]'") from None
    return pa, pq


def _first_bad_row(col: Any) -> tuple[int, str] | None:
    """The first null row or row of another length in an Arrow list column, to name it in errors."""
    pa, _ = _pyarrow()
    import pyarrow.compute as pc

    if col.null_count:
        return int(pc.index(pc.is_null(col), True).as_py()), "is null"
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        diff = np.flatnonzero(lengths != lengths[0]) if len(lengths) else np.empty(0, dtype=np.intp)
        if diff.size:
            i = int(diff[0])
            return i, f"has {int(lengths[i])} values, expected {int(lengths[0])} like the first row of the chunk"
    return None


class _ParquetReader:
    """Record batches of a ``.parquet`` file, with an embedding or a text column."""

    unit = "vec"

    def __init__(self, path: Path, *, chunk_size: int, column: str, text_column: str | None,
                 vectors_only: bool) -> None:
        pa, pq = _pyarrow()
        try:
            # buffer_size > 0 and no pre-buffering: pages are read as decoded, not whole column chunks.
            self._file = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError) as exc:
            raise StreamError(f"{path} is not a readable .parquet file: {exc}") from exc
        schema = self._file.schema_arrow
        names = list(schema.names)
        if column in names:
            self.embeds = False
            ftype = schema.field(column).type
            self.dim = ftype.list_size if pa.types.is_fixed_size_list(ftype) else None
        elif text_column is not None and text_column in names:
            self.embeds = True
            self.dim = None
        else:
            wanted = f"{column!r}" + (f" nor a text column {text_column!r}" if text_column else "")
            raise StreamError(f"{path} has no column {wanted}; its columns are {names}")
        self.path, self.chunk_size = path, chunk_size
        self.column, self.text_column = column, text_column
        self.n_rows = int(self._file.metadata.num_rows)
        self.total: int | None = self.n_rows
        self._columns = [text_column if self.embeds else column] if vectors_only else None

    def __iter__(self) -> Iterator[_Chunk]:
        pa, _ = _pyarrow()
        start = 0
        batches = self._file.iter_batches(batch_size=self.chunk_size, columns=self._columns, use_threads=False)
        for k, batch in enumerate(batches):
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            chunk = _Chunk(index=k, start=start, n=table.num_rows, consumed=table.num_rows, table=table)
            if self.embeds:
                chunk.texts = table[self.text_column].to_pylist()
                for i, t in enumerate(chunk.texts):
                    if not isinstance(t, str):
                        raise StreamError(f"{self.path}: {chunk.where()}: column {self.text_column!r} is "
                                          f"{'null' if t is None else 'not a string'} at {chunk.row_name(i)}")
            else:
                bad = _first_bad_row(table[self.column])
                if bad is not None:
                    raise StreamError(f"{self.path}: {chunk.where()}: column {self.column!r} {bad[1]} at "
                                      f"{chunk.row_name(bad[0])}")
                try:
                    chunk.vectors = column_to_matrix(table[self.column], name=self.column)
                except (TypeError, ValueError) as exc:
                    raise StreamError(f"{self.path}: {chunk.where()}: {exc}") from exc
            start += table.num_rows
            yield chunk

    def close(self) -> None:
        self._file.close()


class _JsonlReader:
    """Records of a ``.jsonl`` file, with an embedding field or a text field."""

    unit = "B"

    def __init__(self, path: Path, *, chunk_size: int, column: str, text_column: str | None) -> None:
        self.path, self.chunk_size = path, chunk_size
        self.column, self.text_column = column, text_column or "text"
        self.total: int | None = path.stat().st_size
        self.dim: int | None = None
        self.n_rows: int | None = None
        first = next(self._lines(), None)
        if first is None:
            raise StreamError(f"{path} has no records to protect")
        line_no, obj, _ = first
        if isinstance(obj, dict) and self.column in obj:
            self.embeds = False
        elif isinstance(obj, str) or (isinstance(obj, dict) and isinstance(obj.get(self.text_column), str)):
            self.embeds = True
        else:
            raise StreamError(self._missing(line_no))

    def _missing(self, line_no: int) -> str:
        return (f"{self.path}:{line_no} has no {self.column!r} field (a list of numbers) "
                f"and no string {self.text_column!r} field")

    def _lines(self) -> Iterator[tuple[int, Any, int]]:
        """``(line number, parsed JSON, bytes consumed)`` for every non-blank line."""
        consumed = 0
        with self.path.open("rb") as fh:
            for line_no, raw in enumerate(fh, 1):
                consumed += len(raw)
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:  # JSONDecodeError and UnicodeDecodeError
                    raise StreamError(f"{self.path}:{line_no} is not valid JSON") from None
                yield line_no, obj, consumed
                consumed = 0

    def count_records(self) -> int:
        """Non-blank lines (each one must be a record), without parsing them."""
        if self.n_rows is None:
            with self.path.open("rb") as fh:
                self.n_rows = sum(1 for raw in fh if raw.strip())
        return self.n_rows

    def _vector(self, obj: Any, line_no: int) -> np.ndarray:
        v = obj.get(self.column) if isinstance(obj, dict) else None
        if v is None:
            raise StreamError(f"{self.path}:{line_no} has no {self.column!r} field (a list of numbers)")
        try:
            arr = np.asarray(v) if isinstance(v, list) else None
        except ValueError:  # nested lists of different lengths
            arr = None
        if arr is None or arr.ndim != 1 or arr.dtype.kind not in "fiu":
            raise StreamError(f"{self.path}:{line_no}: field {self.column!r} must be a flat list of numbers")
        if self.dim is None:
            self.dim = int(arr.shape[0])
        elif arr.shape[0] != self.dim:
            raise StreamError(f"{self.path}:{line_no}: field {self.column!r} has {arr.shape[0]} values, "
                              f"expected {self.dim} like the lines before it")
        return arr.astype(np.float64, copy=False)  # JSON integers are numbers, not an integer dtype

    def _text(self, obj: Any, line_no: int) -> str:
        text = obj if isinstance(obj, str) else obj.get(self.text_column) if isinstance(obj, dict) else None
        if not isinstance(text, str):
            raise StreamError(f"{self.path}:{line_no} has no string {self.text_column!r} field")
        return text

    def __iter__(self) -> Iterator[_Chunk]:
        k = start = consumed = 0
        records: list[Any] = []
        lines: list[int] = []
        items: list[Any] = []
        for line_no, obj, nbytes in self._lines():
            items.append(self._text(obj, line_no) if self.embeds else self._vector(obj, line_no))
            records.append(obj)
            lines.append(line_no)
            consumed += nbytes
            if len(records) == self.chunk_size:
                yield self._chunk(k, start, consumed, items, records, lines)
                k, start, consumed = k + 1, start + len(records), 0
                records, lines, items = [], [], []
        if records:
            yield self._chunk(k, start, consumed, items, records, lines)

    def _chunk(self, k: int, start: int, consumed: int, items: list[Any], records: list[Any],
               lines: list[int]) -> _Chunk:
        chunk = _Chunk(index=k, start=start, n=len(records), consumed=consumed, records=records, lines=lines)
        if self.embeds:
            chunk.texts = items
        else:
            chunk.vectors = column_to_matrix(items, name=self.column)
        return chunk

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- writers
class _NpyWriter:
    """An ``(n, D)`` float32 ``.npy`` of known ``n``, written through a memory map chunk by chunk."""

    def __init__(self, path: Path, *, n_rows: int) -> None:
        self.path, self.n_rows = path, n_rows
        self._out: np.memmap | None = None
        self._pages: _Pages | None = None
        self.rows = 0

    def write(self, chunk: _Chunk, y: np.ndarray) -> None:
        if self._out is None:
            self._out = np.lib.format.open_memmap(self.path, mode="w+", dtype=np.float32,
                                                  shape=(self.n_rows, y.shape[1]))
            self._pages = _Pages(self._out)
        if self.rows + y.shape[0] > self.n_rows:
            raise StreamError(f"the input has more rows than the {self.n_rows} counted when it was opened")
        self._out[self.rows : self.rows + y.shape[0]] = y
        self.rows += y.shape[0]
        assert self._pages is not None
        self._pages.release(self.rows * y.shape[1] * 4, flush=True)

    def close(self) -> None:
        if self._out is None:
            return
        if self.rows != self.n_rows:
            raise StreamError(f"the input has {self.rows} rows, not the {self.n_rows} counted when it was opened")
        self._out.flush()
        self._out = self._pages = None  # unmaps the file

    def abort(self) -> None:
        self._out = self._pages = None


class _ParquetWriter:
    """A ``.parquet`` file, one row group per chunk, pass-through columns kept."""

    def __init__(self, path: Path, *, column: str, output_column: str, drop_clean: bool) -> None:
        self.path, self.column, self.output_column, self.drop_clean = path, column, output_column, drop_clean
        self._writer: Any = None

    def write(self, chunk: _Chunk, y: np.ndarray) -> None:
        pa, pq = _pyarrow()
        arr = matrix_to_arrow(y)
        table = chunk.table if chunk.table is not None else pa.table({})
        if self.drop_clean and self.column in table.column_names:
            table = table.drop_columns([self.column])
        names = table.column_names
        if self.output_column in names:
            table = table.set_column(names.index(self.output_column), self.output_column, arr)
        elif table.num_columns:
            table = table.append_column(self.output_column, arr)
        else:
            table = pa.table({self.output_column: arr})
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def abort(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a second error must not hide the first; the file is removed anyway
            self._writer = None


class _JsonlWriter:
    """A ``.jsonl`` file: each input record with the protected vector under the output field."""

    def __init__(self, path: Path, *, column: str, output_column: str, text_column: str, drop_clean: bool) -> None:
        self.column, self.output_column, self.text_column, self.drop_clean = column, output_column, text_column, drop_clean
        self._fh = path.open("wb")

    def write(self, chunk: _Chunk, y: np.ndarray) -> None:
        records = chunk.records if chunk.records is not None else [{} for _ in range(y.shape[0])]
        lines = []
        for rec, vec in zip(records, y.tolist(), strict=True):
            out = {self.text_column: rec} if isinstance(rec, str) else dict(rec)
            if self.drop_clean:
                out.pop(self.column, None)
            out[self.output_column] = vec
            lines.append(json.dumps(out, ensure_ascii=False))
        self._fh.write(("\n".join(lines) + "\n").encode("utf-8"))

    def close(self) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


# --------------------------------------------------------------------------- driver
_ROW_REF = re.compile(r"\brow (\d+)|\btexts\[(\d+)\]")


def _absolute(message: str, chunk: _Chunk) -> str:
    """Turn the chunk-relative ``row 3`` / ``texts[3]`` of a validation message into absolute ones."""

    def sub(m: re.Match[str]) -> str:
        i = int(m.group(1) or m.group(2))
        return chunk.row_name(i) if i < chunk.n else m.group(0)

    return _ROW_REF.sub(sub, message)


def _suffix(path: Path, role: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise StreamError(f"unsupported {role} file type {path.suffix or '(none)'!r} for {path}: "
                          "use .npy, .parquet or .jsonl")
    return suffix


def _temp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")


def protect_file(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    protector: Any = None,
    policy: str | os.PathLike[str] | None = None,
    encoder: str | None = None,
    secure_mode: bool = False,
    column: str = "embedding",
    output_column: str | None = None,
    text_column: str | None = "text",
    chunk_size: int = 4096,
    progress: bool = True,
) -> StreamReport:
    """Protect every vector of a ``.npy``, ``.parquet`` or ``.jsonl`` file in bounded memory.

    Args:
        input: The file to read; its suffix gives its format.
        output: The file to write (``.npy``, ``.parquet`` or ``.jsonl``, see
            :data:`SUPPORTED_CONVERSIONS`). It appears only when every chunk succeeded.
        protector: A ready :class:`~textcrafter_rag.protector.Protector`; default one from
            ``policy``, ``encoder`` and ``secure_mode`` (:func:`~textcrafter_rag.protector.protector_for`).
        policy: A saved policy directory (default: the shipped policy, see ``protector_for``).
        encoder: For text inputs: ``"bundled"`` (the default when texts must be embedded) or a
            sentence-transformers model name or path.
        secure_mode: Draw noise from the OS CSPRNG.
        column: The embedding column (parquet) or field (jsonl).
        output_column: Where protected vectors go; default ``column``. If it differs, the clean
            embedding column is dropped from the output.
        text_column: The text column or field embedded when there is no embedding column.
        chunk_size: Rows read, protected and written per step; bounds peak memory.
        progress: Show a progress bar (rows; bytes for ``.jsonl``).

    Raises:
        FileNotFoundError: The input file or the output folder does not exist.
        StreamError: An unsupported format or conversion, a missing column, an invalid row; the
            message names the chunk and row or line. Nothing is left at ``output`` then.
    """
    from tqdm.auto import tqdm

    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    src, dst = Path(input), Path(output)
    in_fmt, out_fmt = _suffix(src, "input"), _suffix(dst, "output")
    if (in_fmt, out_fmt) not in SUPPORTED_CONVERSIONS:
        raise StreamError(f"cannot write {in_fmt} input to {out_fmt}: write {in_fmt} (pass-through columns "
                          "kept) or .npy (the protected vectors only)")
    if not src.is_file():
        raise FileNotFoundError(f"input file {src} does not exist")
    if not dst.parent.is_dir():
        raise FileNotFoundError(f"output folder {dst.parent} does not exist")
    if dst.exists() and dst.resolve() == src.resolve():
        raise StreamError(f"the output {dst} is the input file; write to another path")
    out_col = output_column or column

    reader: _NpyReader | _ParquetReader | _JsonlReader
    if in_fmt == ".npy":
        reader = _NpyReader(src, chunk_size=chunk_size)
    elif in_fmt == ".parquet":
        reader = _ParquetReader(src, chunk_size=chunk_size, column=column, text_column=text_column,
                                vectors_only=out_fmt == ".npy")
    else:
        reader = _JsonlReader(src, chunk_size=chunk_size, column=column, text_column=text_column)
    try:
        n_rows = reader.n_rows
        if out_fmt == ".npy" and isinstance(reader, _JsonlReader):
            n_rows = reader.count_records()
        if n_rows == 0:
            raise StreamError(f"{src} has no rows to protect")
        if protector is None:
            from .protector import protector_for

            name = encoder if encoder is not None else ("bundled" if reader.embeds else None)
            protector = protector_for(policy=policy, encoder=name, secure_mode=secure_mode, chunk_size=chunk_size)
        elif reader.embeds and protector.encoder is None:
            raise StreamError(f"{src} holds texts to embed but the protector has no encoder")
        dim = protector.dimension
        if dim is not None and reader.dim is not None and reader.dim != dim:
            raise StreamError(f"{src}: the vectors have dimension {reader.dim}, expected {dim} for this policy")

        tmp = _temp_sibling(dst)
        drop_clean = not reader.embeds and out_col != column
        writer: _NpyWriter | _ParquetWriter | _JsonlWriter | None
        rows = chunks = 0
        writer = None
        t0 = time.perf_counter()
        try:
            if out_fmt == ".npy":
                assert n_rows is not None
                writer = _NpyWriter(tmp, n_rows=n_rows)
            elif out_fmt == ".parquet":
                writer = _ParquetWriter(tmp, column=column, output_column=out_col, drop_clean=drop_clean)
            else:
                writer = _JsonlWriter(tmp, column=column, output_column=out_col, text_column=text_column or "text",
                                      drop_clean=drop_clean)
            desc = "Embedding + protecting" if reader.embeds else "Protecting"
            with tqdm(total=reader.total, unit=reader.unit, unit_scale=reader.unit == "B", desc=desc,
                      disable=not progress, dynamic_ncols=True) as bar:
                for chunk in reader:
                    try:
                        y = protector.embed_documents(chunk.texts) if chunk.vectors is None \
                            else protector.protect(chunk.vectors)
                    except (TypeError, ValueError) as exc:
                        raise StreamError(f"{src}: {chunk.where()}: {_absolute(str(exc), chunk)}; "
                                          "nothing was written") from exc
                    writer.write(chunk, y)
                    rows, chunks, dim = rows + chunk.n, chunks + 1, int(y.shape[1])
                    bar.update(chunk.consumed)
            writer.close()
            if rows == 0:
                raise StreamError(f"{src} has no rows to protect")
            os.replace(tmp, dst)
        except BaseException:
            if writer is not None:
                writer.abort()
            tmp.unlink(missing_ok=True)
            raise
    finally:
        reader.close()
    return StreamReport(input=src, output=dst, rows=rows, dim=int(dim or 0), chunks=chunks, embedded=reader.embeds,
                        seconds=time.perf_counter() - t0, mechanism=repr(protector.mechanism))
