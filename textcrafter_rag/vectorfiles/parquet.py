"""``.parquet`` files (needs ``pyarrow``): an embedding column or a text column, other columns kept.

Reading goes page by page (no pre-buffering of whole column chunks), so memory follows the chunk
size; random access reads only the row groups, and only the columns, the picked rows need.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..batches import column_to_matrix, matrix_to_arrow
from ..errors import VectorFileError
from .core import Chunk, FormatWriter, ReadOptions, Rows, VectorReader, WriteOptions, check_indices, pyarrow_modules

__all__ = ["ParquetReader", "ParquetWriter"]


def _first_bad_row(col: Any) -> tuple[int, str] | None:
    """The first null row or row of another length in an Arrow list column, to name it in errors."""
    pa, _ = pyarrow_modules()
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


def _may_hold_text(pa: Any, t: Any) -> bool:
    """Whether values of Arrow type ``t`` can contain strings (so a text payload could hide there)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", bool)(t):
        return True
    if pa.types.is_dictionary(t):
        return _may_hold_text(pa, t.value_type)
    if pa.types.is_struct(t):
        return any(_may_hold_text(pa, t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _may_hold_text(pa, t.key_type) or _may_hold_text(pa, t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _may_hold_text(pa, t.value_type)
    return False


class ParquetReader(VectorReader):
    """Record batches of a ``.parquet`` file, with an embedding or a text column."""

    def __init__(self, path: Path, options: ReadOptions) -> None:
        super().__init__(path, options)
        pa, pq = pyarrow_modules()
        try:
            # buffer_size > 0 and no pre-buffering: pages are read as decoded, not whole column chunks.
            self._file = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise VectorFileError(f"{path} is not a readable .parquet file: {exc}") from exc
        schema = self._file.schema_arrow
        names = list(schema.names)
        column, text_column = options.column, options.text_column
        self._source = column  # the column read for each row: vectors, or texts to embed
        if column in names:
            ftype = schema.field(column).type
            self.dim = ftype.list_size if pa.types.is_fixed_size_list(ftype) else None
        elif text_column is not None and text_column in names:
            self.embeds, self._source = True, text_column
        else:
            self._file.close()
            wanted = f"{column!r}" + (f" nor a text column {text_column!r}" if text_column else "")
            raise VectorFileError(f"{path} has no column {wanted}; its columns are {names}")
        self._names = names
        self.n_rows = int(self._file.metadata.num_rows)
        self.total = self.n_rows

    def _matrix(self, col: Any, where: str, row_name: Any) -> np.ndarray:
        bad = _first_bad_row(col)
        column = self.options.column
        if bad is not None:
            raise VectorFileError(f"{self.path}: {where}column {column!r} {bad[1]} at {row_name(bad[0])}")
        try:
            return column_to_matrix(col, name=column)
        except (TypeError, ValueError) as exc:
            raise VectorFileError(f"{self.path}: {where}{exc}") from exc

    def __iter__(self) -> Iterator[Chunk]:
        pa, _ = pyarrow_modules()
        start = 0
        columns = [self._source] if self.options.vectors_only else None
        batches = self._file.iter_batches(batch_size=self.options.chunk_size, columns=columns, use_threads=False)
        for k, batch in enumerate(batches):
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            chunk = Chunk(index=k, start=start, n=table.num_rows, consumed=table.num_rows, table=table)
            if self.embeds:
                chunk.texts = table[self._source].to_pylist()
                for i, t in enumerate(chunk.texts):
                    if not isinstance(t, str):
                        raise VectorFileError(
                            f"{self.path}: {chunk.where()}: column {self._source!r} is "
                            f"{'null' if t is None else 'not a string'} at {chunk.row_name(i)}"
                        )
            else:
                chunk.vectors = self._matrix(table[self._source], f"{chunk.where()}: ", chunk.row_name)
            start += table.num_rows
            yield chunk

    def take(self, indices: np.ndarray, *, with_columns: bool = False, progress: bool = False) -> Rows:
        """The rows ``indices``, one row group at a time; ``with_columns`` adds the columns that may hold text."""
        if self.embeds:
            raise VectorFileError(f"{self.path} has no column {self.options.column!r}; its columns are {self._names}")
        pa, _ = pyarrow_modules()
        idx = check_indices(indices, self.n_rows, self.path)
        column, schema = self.options.column, self._file.schema_arrow
        others = [n for n in self._names if n != column and _may_hold_text(pa, schema.field(n).type)]
        read = [column, *others] if with_columns else [column]
        parts: list[np.ndarray] = []
        columns: dict[str, list[Any]] = {n: [] for n in others} if with_columns else {}
        start, groups = 0, self._file.num_row_groups
        for g in tqdm(range(groups), desc="reading rows", disable=not progress or groups < 4):
            n = self._file.metadata.row_group(g).num_rows
            want = idx[(idx >= start) & (idx < start + n)]
            if want.size:
                table = self._file.read_row_group(g, columns=read).take(pa.array(want - start))
                rows = want.tolist()
                part = self._matrix(table[column], "", lambda i, rows=rows: f"row {rows[i]}")
                if parts and part.shape[1] != parts[0].shape[1]:
                    raise VectorFileError(
                        f"{self.path}: column {column!r} has {part.shape[1]} values at row {rows[0]}, "
                        f"expected {parts[0].shape[1]} like row {int(idx[0])}"
                    )
                parts.append(part)
                for name in columns:
                    columns[name].extend(table[name].to_pylist())
            start += n
        dim = self.dim or (parts[0].shape[1] if parts else 0)
        vectors = np.concatenate(parts, 0) if parts else np.empty((0, dim), np.float32)
        return Rows(vectors=vectors, columns=columns)

    def close(self) -> None:
        self._file.close()


class ParquetWriter(FormatWriter):
    """A ``.parquet`` file, one row group per chunk, pass-through columns kept."""

    def __init__(self, path: Path, options: WriteOptions) -> None:
        super().__init__(path, options)
        self._writer: Any = None

    def write(self, chunk: Chunk, y: np.ndarray) -> None:
        pa, pq = pyarrow_modules()
        opts, arr = self.options, matrix_to_arrow(y)
        table = chunk.table if chunk.table is not None else pa.table({})
        if opts.drop_clean and opts.column in table.column_names:
            table = table.drop_columns([opts.column])
        names = table.column_names
        if opts.output_column in names:
            table = table.set_column(names.index(opts.output_column), opts.output_column, arr)
        elif table.num_columns:
            table = table.append_column(opts.output_column, arr)
        else:
            table = pa.table({opts.output_column: arr})
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def abort(self) -> None:
        try:
            self.close()
        except Exception:  # a second error must not hide the first; the file is removed anyway
            self._writer = None
