"""``.jsonl`` files: one JSON object per line with an embedding field (a list of numbers) or a text field.

Lines are read as bytes, one at a time, so memory follows the chunk size. Blank lines are skipped;
errors name the 1-based line. Random access parses only the picked lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..batches import column_to_matrix
from ..errors import VectorFileError
from .core import Chunk, FormatWriter, ReadOptions, Rows, VectorReader, WriteOptions, check_indices

__all__ = ["JsonlReader", "JsonlWriter", "iter_records", "text_of"]


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """``(line number, raw bytes, bytes consumed since the previous one)`` for every non-blank line."""
    consumed = 0
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            consumed += len(raw)
            if raw.strip():
                yield line_no, raw, consumed
                consumed = 0


def _parse(path: Path, line_no: int, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError; the line itself is never quoted
        raise VectorFileError(f"{path}:{line_no} is not valid JSON") from None


def iter_records(path: Path) -> Iterator[tuple[int, Any, int]]:
    """``(line number, parsed JSON, bytes consumed)`` for every non-blank line of a ``.jsonl`` file."""
    for line_no, raw, consumed in _raw_lines(path):
        yield line_no, _parse(path, line_no, raw), consumed


def text_of(obj: Any, field: str) -> str | None:
    """The text of a record: its string ``field``, or the record itself when it is a bare JSON string."""
    if isinstance(obj, str):
        return obj
    text = obj.get(field) if isinstance(obj, dict) else None
    return text if isinstance(text, str) else None


class JsonlReader(VectorReader):
    """Records of a ``.jsonl`` file, with an embedding field or a text field."""

    unit = "B"

    def __init__(self, path: Path, options: ReadOptions) -> None:
        super().__init__(path, options)
        self.total = path.stat().st_size
        first = next(iter_records(path), None)
        if first is None:
            raise VectorFileError(f"{path} has no records")
        line_no, obj, _ = first
        if isinstance(obj, dict) and options.column in obj:
            self.embeds = False
        elif options.text_column is not None and text_of(obj, options.text_column) is not None:
            self.embeds = True
        else:
            raise VectorFileError(self._missing(line_no))

    def _missing(self, line_no: int) -> str:
        text = self.options.text_column
        return f"{self.path}:{line_no} has no {self.options.column!r} field (a list of numbers)" + (
            f" and no string {text!r} field" if text is not None else ""
        )

    def count_rows(self) -> int:
        """Non-blank lines (each one must be a record), without parsing them."""
        if self.n_rows is None:
            self.n_rows = sum(1 for _ in _raw_lines(self.path))
        return self.n_rows

    def _vector(self, obj: Any, line_no: int) -> np.ndarray:
        column = self.options.column
        v = obj.get(column) if isinstance(obj, dict) else None
        if v is None:
            raise VectorFileError(f"{self.path}:{line_no} has no {column!r} field (a list of numbers)")
        try:
            arr = np.asarray(v) if isinstance(v, list) else None
        except ValueError:  # nested lists of different lengths
            arr = None
        if arr is None or arr.ndim != 1 or arr.dtype.kind not in "fiu":
            raise VectorFileError(f"{self.path}:{line_no}: field {column!r} must be a flat list of numbers")
        if self.dim is None:
            self.dim = int(arr.shape[0])
        elif arr.shape[0] != self.dim:
            raise VectorFileError(
                f"{self.path}:{line_no}: field {column!r} has {arr.shape[0]} values, "
                f"expected {self.dim} like the lines before it"
            )
        return arr.astype(np.float64, copy=False)  # JSON integers are numbers, not an integer dtype

    def _text(self, obj: Any, line_no: int) -> str:
        field = self.options.text_column or ""
        text = text_of(obj, field)
        if text is None:
            raise VectorFileError(f"{self.path}:{line_no} has no string {field!r} field")
        return text

    def __iter__(self) -> Iterator[Chunk]:
        k = start = consumed = 0
        size = self.options.chunk_size
        records: list[Any] = []
        lines: list[int] = []
        items: list[Any] = []
        for line_no, obj, nbytes in iter_records(self.path):
            items.append(self._text(obj, line_no) if self.embeds else self._vector(obj, line_no))
            records.append(obj)
            lines.append(line_no)
            consumed += nbytes
            if len(records) == size:
                yield self._chunk(k, start, consumed, items, records, lines)
                k, start, consumed = k + 1, start + len(records), 0
                records, lines, items = [], [], []
        if records:
            yield self._chunk(k, start, consumed, items, records, lines)

    def _chunk(
        self, k: int, start: int, consumed: int, items: list[Any], records: list[Any], lines: list[int]
    ) -> Chunk:
        chunk = Chunk(index=k, start=start, n=len(records), consumed=consumed, records=records, lines=lines)
        if self.embeds:
            chunk.texts = items
        else:
            chunk.vectors = column_to_matrix(items, name=self.options.column)
        return chunk

    def take(self, indices: np.ndarray, *, with_columns: bool = False, progress: bool = False) -> Rows:
        """The records ``indices`` (0-based, blank lines not counted); only those lines are parsed."""
        idx = check_indices(indices, self.n_rows, self.path)
        wanted, pos, seen = idx.tolist(), 0, 0
        vectors: list[np.ndarray] = []
        records: list[dict[str, Any]] = []
        with tqdm(
            total=self.total, unit="B", unit_scale=True, desc="reading rows", disable=not progress, mininterval=2
        ) as bar:
            for line_no, raw, nbytes in _raw_lines(self.path):
                if pos == len(wanted):
                    break
                bar.update(nbytes)
                seen += 1
                if seen - 1 != wanted[pos]:
                    continue
                obj = _parse(self.path, line_no, raw)
                vectors.append(self._vector(obj, line_no))
                if with_columns:
                    records.append({k: v for k, v in obj.items() if k != self.options.column})
                pos += 1
        if pos < len(wanted):
            raise VectorFileError(f"{self.path}: row {wanted[pos]} is past the end ({seen} records)")
        out = np.stack(vectors) if vectors else np.empty((0, self.dim or 0), np.float64)
        names = list(dict.fromkeys(k for rec in records for k in rec))
        return Rows(vectors=out, columns={n: [rec.get(n) for rec in records] for n in names})


class JsonlWriter(FormatWriter):
    """A ``.jsonl`` file: each input record with the vector under ``options.output_column``."""

    def __init__(self, path: Path, options: WriteOptions) -> None:
        super().__init__(path, options)
        self._fh = path.open("wb")

    def write(self, chunk: Chunk, y: np.ndarray) -> None:
        opts = self.options
        records = chunk.records if chunk.records is not None else [{} for _ in range(y.shape[0])]
        lines = []
        for rec, vec in zip(records, y.tolist(), strict=True):
            out = {opts.text_column: rec} if isinstance(rec, str) else dict(rec)
            if opts.drop_clean:
                out.pop(opts.column, None)
            out[opts.output_column] = vec
            lines.append(json.dumps(out, ensure_ascii=False))
        self._fh.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.rows += len(lines)

    def close(self) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()
