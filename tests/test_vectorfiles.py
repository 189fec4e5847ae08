"""The shared vector-file layer (``textcrafter_rag.vectorfiles``): readers, writers, random rows, texts, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from textcrafter_rag.audit.store import AuditInputError
from textcrafter_rag.errors import TextcrafterError, VectorFileError
from textcrafter_rag.streaming import StreamError
from textcrafter_rag.vectorfiles import (
    AtomicWriter,
    ReadOptions,
    VectorFileNotFoundError,
    WriteOptions,
    check_file,
    count_rows,
    file_format,
    open_reader,
    raising,
    read_rows,
    read_texts,
)
from textcrafter_rag.vectorfiles.npy import NpyReader, NpyWriter

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N, D = 23, 8
SECRET = "Jane Doe 4111 1111 1111 1111"


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((N, D)).astype(np.float32)


def _npy(path: Path, x: np.ndarray) -> Path:
    with path.open("wb") as fh:  # np.save(path) would append ".npy" to an upper-case ".NPY"
        np.save(fh, x)
    return path


def _parquet(path: Path, x: np.ndarray, **extra) -> Path:
    emb = pa.array([list(map(float, v)) for v in x], type=pa.list_(pa.float32()))
    pq.write_table(pa.table({"id": list(range(len(x))), "embedding": emb, **extra}), path, row_group_size=5)
    return path


def _jsonl(path: Path, records: list, *, blank_after: int | None = None) -> Path:
    lines = [json.dumps(r) for r in records]
    if blank_after is not None:
        lines.insert(blank_after, "  ")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _write(fmt: str, path: Path, x: np.ndarray) -> Path:
    if fmt == "npy":
        return _npy(path, x)
    if fmt == "parquet":
        return _parquet(path, x, text=[f"note {i}" for i in range(len(x))])
    return _jsonl(
        path, [{"id": i, "embedding": v.tolist(), "text": f"note {i}"} for i, v in enumerate(x)], blank_after=4
    )


# --------------------------------------------------------------------------- suffixes, any case
@pytest.mark.parametrize(
    ("name", "fmt"),
    [("a.npy", ".npy"), ("a.NPY", ".npy"), ("b.Parquet", ".parquet"), ("c.JSONL", ".jsonl"), ("d.JsonL", ".jsonl")],
)
def test_file_format_ignores_case(name, fmt) -> None:
    assert file_format(name) == fmt


@pytest.mark.parametrize("name", ["a.csv", "a", "a.npz", "a.json"])
def test_file_format_refuses_other_suffixes(name) -> None:
    with pytest.raises(VectorFileError, match=r"use \.npy, \.parquet or \.jsonl"):
        file_format(name)


@pytest.mark.parametrize(("fmt", "name"), [("npy", "s.NPY"), ("parquet", "s.Parquet"), ("jsonl", "s.JSONL")])
def test_upper_case_files_are_read_like_lower_case_ones(x, tmp_path, fmt, name) -> None:
    path = _write(fmt, tmp_path / name, x)
    assert count_rows(path) == N
    with open_reader(path, ReadOptions(chunk_size=7)) as reader:
        got = np.concatenate([c.vectors for c in reader])
    np.testing.assert_allclose(got, x, rtol=1e-6)
    np.testing.assert_allclose(read_rows(path, [0, 22]).vectors, x[[0, 22]], rtol=1e-6)


# --------------------------------------------------------------------------- chunked reading and writing
@pytest.mark.parametrize("fmt", ["npy", "parquet", "jsonl"])
@pytest.mark.parametrize("chunk_size", [1, 6, 100])
def test_chunks_cover_every_row_once_in_order(x, tmp_path, fmt, chunk_size) -> None:
    path = _write(fmt, tmp_path / f"s.{fmt}", x)
    with open_reader(path, ReadOptions(chunk_size=chunk_size)) as reader:
        chunks = list(reader)
    assert all(c.n <= chunk_size for c in chunks) and [c.index for c in chunks] == list(range(len(chunks)))
    assert [c.start for c in chunks] == list(range(0, N, chunk_size))
    np.testing.assert_allclose(np.concatenate([c.vectors for c in chunks]), x, rtol=1e-6)
    if fmt == "jsonl":  # the blank line 5 is skipped and counted in the line numbers
        assert [n for c in chunks for n in c.lines] == [1, 2, 3, 4, *range(6, N + 2)]


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("npy", "npy"),
        ("npy", "parquet"),
        ("npy", "jsonl"),
        ("parquet", "parquet"),
        ("jsonl", "jsonl"),
        ("jsonl", "npy"),
    ],
)
def test_atomic_writer_round_trip_keeps_other_columns(x, tmp_path, src, dst) -> None:
    path = _write(src, tmp_path / f"in.{src}", x)
    out = tmp_path / f"out.{dst.upper()}"
    with open_reader(path, ReadOptions(chunk_size=4)) as reader, AtomicWriter(out, WriteOptions(n_rows=N)) as w:
        for chunk in reader:
            w.write(chunk, chunk.vectors * 2)
    assert w.rows == N
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, out.name])
    with open_reader(out) as reader:
        chunks = list(reader)
    np.testing.assert_allclose(np.concatenate([c.vectors for c in chunks]), 2 * x, rtol=1e-6)
    if src == dst == "parquet":
        assert pq.read_table(out).column_names == ["id", "embedding", "text"]
        assert pq.read_table(out)["text"].to_pylist() == [f"note {i}" for i in range(N)]
    if src == dst == "jsonl":
        assert [r["text"] for c in chunks for r in c.records] == [f"note {i}" for i in range(N)]


def _copy(src: Path, dst: Path, *, stop_after: int | None = None, fail_at: int | None = None) -> None:
    """Copy ``src`` to ``dst`` in chunks of 5 rows; stop early, or raise ``RuntimeError("boom")``, at a chunk."""
    with open_reader(src, ReadOptions(chunk_size=5)) as reader, AtomicWriter(dst, WriteOptions(n_rows=N)) as w:
        for chunk in reader:
            if stop_after is not None and chunk.index >= stop_after:
                break
            w.write(chunk, chunk.vectors)
            if chunk.index == fail_at:
                raise RuntimeError("boom")


def test_atomic_writer_leaves_nothing_on_error_and_keeps_an_old_file(x, tmp_path) -> None:
    path = _npy(tmp_path / "in.npy", x)
    for suffix in (".npy", ".parquet", ".jsonl"):
        out = tmp_path / f"out{suffix}"
        out.write_bytes(b"previous")
        with pytest.raises(RuntimeError, match="boom"):
            _copy(path, out, fail_at=2)
        assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy", "out.jsonl", "out.npy", "out.parquet"]
    _copy(path, tmp_path / "out.npy")  # the same copy without the error replaces the old file
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), x)


def test_npy_writer_refuses_a_short_input(x, tmp_path) -> None:
    path = _npy(tmp_path / "in.npy", x)
    with pytest.raises(VectorFileError, match=f"has 20 rows, not the {N} counted"):
        _copy(path, tmp_path / "out.npy", stop_after=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy"]


# --------------------------------------------------------------------------- random rows
@pytest.mark.parametrize("fmt", ["npy", "parquet", "jsonl"])
def test_read_rows_picks_exactly_the_given_rows(x, tmp_path, fmt) -> None:
    path = _write(fmt, tmp_path / f"s.{fmt}", x)
    idx = np.array([0, 4, 5, 9, 10, 22])  # across parquet row groups (5 rows) and the jsonl blank line
    rows = read_rows(path, idx, with_columns=True)
    np.testing.assert_allclose(rows.vectors, x[idx], rtol=1e-6)
    if fmt == "npy":
        assert rows.columns == {}
    else:
        assert rows.columns["text"] == [f"note {i}" for i in idx]
        assert "embedding" not in rows.columns
    assert read_rows(path, []).vectors.shape[0] == 0


def test_read_rows_parquet_reads_only_text_capable_columns(x, tmp_path) -> None:
    meta = pa.array([{"page": i, "page_content": f"p {i}"} for i in range(N)])
    path = _parquet(tmp_path / "s.parquet", x, score=np.arange(N) * 0.5, meta=meta)
    rows = read_rows(path, [1, 2], with_columns=True)
    assert list(rows.columns) == ["meta"]  # numeric id and score columns are not read
    assert rows.columns["meta"] == [{"page": 1, "page_content": "p 1"}, {"page": 2, "page_content": "p 2"}]


@pytest.mark.parametrize("fmt", ["npy", "parquet", "jsonl"])
@pytest.mark.parametrize("idx", [[3, 2], [1, 1], [-1], [N]])
def test_read_rows_refuses_bad_row_numbers(x, tmp_path, fmt, idx) -> None:
    path = _write(fmt, tmp_path / f"s.{fmt}", x)
    with pytest.raises(VectorFileError, match=r"sorted, unique|past the end"):
        read_rows(path, idx)


def test_jsonl_read_rows_parses_only_the_picked_lines(x, tmp_path) -> None:
    records: list = [{"embedding": v.tolist()} for v in x]
    path = _jsonl(tmp_path / "s.jsonl", records)
    lines = path.read_text().splitlines()
    lines[7] = '{"embedding": [0.1, "' + SECRET  # broken JSON on line 8 (row 7)
    path.write_text("\n".join(lines) + "\n")
    np.testing.assert_allclose(read_rows(path, [6, 8]).vectors, x[[6, 8]], rtol=1e-6)
    with pytest.raises(VectorFileError, match=r"s\.jsonl:8 is not valid JSON") as info:
        read_rows(path, [6, 7])
    assert SECRET not in str(info.value)


def test_parquet_null_and_ragged_rows_are_named_by_absolute_row(x, tmp_path) -> None:
    rows = [list(map(float, v)) for v in x]
    rows[17] = None
    pq.write_table(
        pa.table({"embedding": pa.array(rows, type=pa.list_(pa.float32()))}), tmp_path / "s.parquet", row_group_size=5
    )
    np.testing.assert_allclose(read_rows(tmp_path / "s.parquet", [16, 18]).vectors, x[[16, 18]], rtol=1e-6)
    with pytest.raises(VectorFileError, match="'embedding' is null at row 17"):
        read_rows(tmp_path / "s.parquet", [3, 17])
    with (
        pytest.raises(VectorFileError, match="'embedding' is null at row 17"),
        open_reader(tmp_path / "s.parquet", ReadOptions(chunk_size=8)) as reader,
    ):
        list(reader)


def test_parquet_rows_of_another_length_in_a_later_row_group_are_named(x, tmp_path) -> None:
    rows = [list(map(float, v)) for v in x]
    rows[12] = rows[12][:-1]
    pq.write_table(pa.table({"embedding": rows}), tmp_path / "s.parquet", row_group_size=5)
    with pytest.raises(VectorFileError, match=f"has {D - 1} values at row 12, expected {D} like row 1"):
        read_rows(tmp_path / "s.parquet", [1, 12])


# --------------------------------------------------------------------------- texts
def test_read_texts_jsonl_and_parquet(tmp_path) -> None:
    _jsonl(tmp_path / "t.JSONL", [{"text": "one"}, "two", {"id": 3, "text": "three"}], blank_after=1)
    assert read_texts(tmp_path / "t.JSONL") == ["one", "two", "three"]
    pq.write_table(pa.table({"body": ["a b", "c d"]}), tmp_path / "t.parquet")
    assert read_texts(tmp_path / "t.parquet", field="body") == ["a b", "c d"]
    with pytest.raises(VectorFileError, match="has no column 'text'"):
        read_texts(tmp_path / "t.parquet")


@pytest.mark.parametrize("bad", [{"text": "  "}, {"text": 3}, {"txt": "x"}, ["x"]])
def test_read_texts_names_the_line_without_a_text(tmp_path, bad) -> None:
    _jsonl(tmp_path / "t.jsonl", [{"text": "fine"}, bad])
    with pytest.raises(VectorFileError, match=r"t\.jsonl:2 has no non-empty string 'text' field"):
        read_texts(tmp_path / "t.jsonl")


def test_read_texts_refuses_npy(x, tmp_path) -> None:
    with pytest.raises(VectorFileError, match="holds only vectors"):
        read_texts(_npy(tmp_path / "v.npy", x))


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("v.npy", b"not an array", "not a readable .npy array"),
        ("v.parquet", b"not parquet", "not a readable .parquet file"),
        ("v.jsonl", b"\n \n", "has no records"),
        ("v.jsonl", b'{"vec": [1.0]}\n', "has no 'embedding' field"),
    ],
)
def test_bad_files_raise_vector_file_errors(tmp_path, name, content, match) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(VectorFileError, match=match) as info:
        open_reader(tmp_path / name)
    assert isinstance(info.value, TextcrafterError) and isinstance(info.value, ValueError)
    assert name in str(info.value)


def test_jsonl_text_fallback_follows_text_column(tmp_path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [{"text": "The bank raised rates."}, "A bare string is a text."])
    with open_reader(path) as reader:
        assert reader.embeds and [c.texts for c in reader] == [["The bank raised rates.", "A bare string is a text."]]
    with pytest.raises(VectorFileError, match=r"t\.jsonl:1 has no 'embedding' field \(a list of numbers\)$"):
        open_reader(path, ReadOptions(text_column=None))
    with (
        pytest.raises(VectorFileError, match=r"b\.jsonl:2 has no string 'body' field"),
        open_reader(
            _jsonl(tmp_path / "b.jsonl", [{"body": "x"}, {"id": 2}]), ReadOptions(text_column="body")
        ) as reader,
    ):
        list(reader)


def test_npy_must_be_2d(tmp_path) -> None:
    with pytest.raises(VectorFileError, match="2-D"):
        open_reader(_npy(tmp_path / "v.npy", np.ones(3, dtype=np.float32)))


def test_missing_file_is_both_a_vector_file_error_and_file_not_found(tmp_path) -> None:
    with pytest.raises(VectorFileNotFoundError, match="does not exist") as info:
        check_file(tmp_path / "none.npy")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, VectorFileError)
    (tmp_path / "d.npy").mkdir()
    with pytest.raises(VectorFileError, match="is not a file"):
        check_file(tmp_path / "d.npy")


def test_command_errors_derive_from_vector_file_error() -> None:
    assert issubclass(StreamError, VectorFileError) and issubclass(AuditInputError, VectorFileError)
    assert issubclass(StreamError, ValueError) and issubclass(AuditInputError, ValueError)


def test_raising_converts_and_chains(tmp_path) -> None:
    (tmp_path / "v.jsonl").write_text("")
    with pytest.raises(StreamError, match="no records") as info, raising(StreamError):
        open_reader(tmp_path / "v.jsonl")
    assert type(info.value.__cause__) is VectorFileError
    with pytest.raises(KeyError), raising(StreamError):  # other errors pass untouched
        raise KeyError("k")
    own = AuditInputError("mine")
    with pytest.raises(AuditInputError) as info, raising(AuditInputError):
        raise own
    assert info.value is own


# --------------------------------------------------------------------------- bounded memory
def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (Linux ``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="needs Linux /proc/self/smaps")
def test_mapped_pages_behind_the_cursor_leave_the_resident_set(tmp_path) -> None:
    n, d = 4000, 384  # 6 MB
    x = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    np.save(tmp_path / "in.npy", x)
    reader = NpyReader(tmp_path / "in.npy", ReadOptions(chunk_size=500))
    writer = NpyWriter(tmp_path / "out.npy", WriteOptions(n_rows=n))
    seen = 0
    for chunk in reader:
        writer.write(chunk, chunk.vectors)
        seen = max(seen, _mapped_rss_kb(tmp_path / "in.npy"), _mapped_rss_kb(tmp_path / "out.npy"))
    chunk_kb = 500 * d * 4 // 1024  # 750 kB
    assert seen <= 2 * chunk_kb + 8, seen  # without MADV_DONTNEED both maps grow to 6000 kB
    writer.close()
    reader.close()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), x)
