"""Streaming protection of .npy / .parquet / .jsonl files (``textcrafter_rag.streaming``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from textcrafter_rag.errors import VectorFileError
from textcrafter_rag.policies import shipped_policy_path
from textcrafter_rag.protector import protector_for
from textcrafter_rag.streaming import SUPPORTED_CONVERSIONS, StreamError, protect_file

EPS = 1.0  # the shipped default policy
N = 23  # not a multiple of the chunk sizes below


@pytest.fixture(scope="module")
def protector():
    assert shipped_policy_path("sentence-transformers/all-MiniLM-L6-v2") is not None
    p = protector_for()  # the shipped eps 1.0 policy for 384-d MiniLM vectors
    assert p.mechanism.eps == EPS
    return p


@pytest.fixture
def x() -> np.ndarray:
    rng = np.random.default_rng(7)
    v = rng.standard_normal((N, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Recording:
    """A protector wrapper that records the batch sizes it sees."""

    def __init__(self, inner) -> None:
        self.inner, self.sizes = inner, []
        self.encoder, self.dimension, self.mechanism = inner.encoder, inner.dimension, inner.mechanism

    def protect(self, v):
        self.sizes.append(len(v))
        return self.inner.protect(v)

    def embed_documents(self, texts):
        self.sizes.append(len(texts))
        return self.inner.embed_documents(texts)


def _assert_protected(y: np.ndarray, x: np.ndarray) -> None:
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(y.astype(np.float64) - x, axis=1), EPS, rtol=1e-4)


def _only(tmp_path: Path, *names: str) -> None:
    """The folder holds exactly these files: no output, no temp file left behind."""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def _write_jsonl(path: Path, records: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --------------------------------------------------------------------------- .npy
@pytest.mark.parametrize("chunk_size", [1, 5, 4096])
def test_npy_round_trip(protector, x, tmp_path, chunk_size) -> None:
    np.save(tmp_path / "in.npy", x)
    rec = Recording(protector)
    report = protect_file(
        tmp_path / "in.npy", tmp_path / "out.npy", protector=rec, chunk_size=chunk_size, progress=False
    )
    y = np.load(tmp_path / "out.npy")
    _assert_protected(y, x)
    assert report.rows == N and report.dim == 384 and report.chunks == -(-N // chunk_size)
    assert max(rec.sizes) <= chunk_size and sum(rec.sizes) == N
    _only(tmp_path, "in.npy", "out.npy")


def test_npy_float64_and_fortran_order_input(protector, x, tmp_path) -> None:
    np.save(tmp_path / "in.npy", np.asfortranarray(x.astype(np.float64)))
    protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, chunk_size=4, progress=False)
    _assert_protected(np.load(tmp_path / "out.npy"), x)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_npy_to_other_formats(protector, x, tmp_path, suffix) -> None:
    np.save(tmp_path / "in.npy", x)
    out = tmp_path / f"out{suffix}"
    protect_file(tmp_path / "in.npy", out, protector=protector, chunk_size=6, output_column="vec", progress=False)
    if suffix == ".parquet":
        pq = pytest.importorskip("pyarrow.parquet")
        t = pq.read_table(out)
        assert t.column_names == ["vec"]
        y = np.asarray(t["vec"].to_pylist(), dtype=np.float32)
    else:
        recs = _read_jsonl(out)
        assert all(set(r) == {"vec"} for r in recs)
        y = np.asarray([r["vec"] for r in recs], dtype=np.float32)
    _assert_protected(y, x)


def test_default_protector_is_the_shipped_policy(x, tmp_path) -> None:
    np.save(tmp_path / "in.npy", x)
    report = protect_file(tmp_path / "in.npy", tmp_path / "out.npy", chunk_size=10, progress=False)
    assert report.mechanism == "TextCrafter(eps=1.0)"
    _assert_protected(np.load(tmp_path / "out.npy"), x)


# --------------------------------------------------------------------------- .parquet
def _parquet(path: Path, x: np.ndarray, *, fixed: bool = False, **extra) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from textcrafter_rag.batches import matrix_to_arrow

    emb = matrix_to_arrow(x) if fixed else pa.array([list(map(float, v)) for v in x], type=pa.list_(pa.float32()))
    cols = {"id": pa.array(np.arange(len(x)) * 10), "embedding": emb, **extra}
    pq.write_table(pa.table(cols), path, row_group_size=7)  # row groups that do not match the chunks


@pytest.mark.parametrize(("chunk_size", "fixed"), [(1, False), (5, True), (4096, False)])
def test_parquet_round_trip_keeps_other_columns(protector, x, tmp_path, chunk_size, fixed) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    meta = [f"doc {i}" for i in range(N)]
    _parquet(tmp_path / "in.parquet", x, fixed=fixed, text=meta, meta=[{"k": i} for i in range(N)])
    rec = Recording(protector)
    protect_file(
        tmp_path / "in.parquet", tmp_path / "out.parquet", protector=rec, chunk_size=chunk_size, progress=False
    )
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.column_names == ["id", "embedding", "text", "meta"]
    assert t["id"].to_pylist() == list(range(0, 10 * N, 10))
    assert t["text"].to_pylist() == meta and t["meta"].to_pylist() == [{"k": i} for i in range(N)]
    _assert_protected(np.asarray(t["embedding"].to_pylist(), dtype=np.float32), x)
    assert max(rec.sizes) <= chunk_size
    _only(tmp_path, "in.parquet", "out.parquet")


def test_parquet_output_column_drops_the_clean_vectors(protector, x, tmp_path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    _parquet(tmp_path / "in.parquet", x)
    protect_file(
        tmp_path / "in.parquet",
        tmp_path / "out.parquet",
        protector=protector,
        chunk_size=8,
        output_column="protected",
        progress=False,
    )
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.column_names == ["id", "protected"]
    _assert_protected(np.asarray(t["protected"].to_pylist(), dtype=np.float32), x)


def test_parquet_to_npy(protector, x, tmp_path) -> None:
    _parquet(tmp_path / "in.parquet", x)
    protect_file(tmp_path / "in.parquet", tmp_path / "out.npy", protector=protector, chunk_size=9, progress=False)
    _assert_protected(np.load(tmp_path / "out.npy"), x)


def test_parquet_custom_column_name(protector, x, tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from textcrafter_rag.batches import matrix_to_arrow

    pq.write_table(pa.table({"vec": matrix_to_arrow(x)}), tmp_path / "in.parquet")
    protect_file(tmp_path / "in.parquet", tmp_path / "out.parquet", protector=protector, column="vec", progress=False)
    _assert_protected(np.asarray(pq.read_table(tmp_path / "out.parquet")["vec"].to_pylist(), dtype=np.float32), x)


def test_parquet_texts_are_embedded(minilm, tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    texts = ["The bank raised rates.", "John Smith lives in Leeds.", "Rain is expected tomorrow."]
    pq.write_table(pa.table({"id": [1, 2, 3], "text": texts}), tmp_path / "in.parquet")
    report = protect_file(tmp_path / "in.parquet", tmp_path / "out.parquet", chunk_size=2, progress=False)
    assert report.embedded
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.column_names == ["id", "text", "embedding"] and t["text"].to_pylist() == texts
    _assert_protected(np.asarray(t["embedding"].to_pylist(), dtype=np.float32), minilm.encode(texts))


# --------------------------------------------------------------------------- .jsonl
@pytest.mark.parametrize("chunk_size", [1, 4, 4096])
def test_jsonl_round_trip_keeps_other_fields(protector, x, tmp_path, chunk_size) -> None:
    records = [{"id": f"d{i}", "embedding": v.tolist(), "meta": {"page": i}} for i, v in enumerate(x)]
    lines = [json.dumps(r) for r in records]
    lines.insert(5, "   ")  # blank lines are skipped
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    rec = Recording(protector)
    protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=rec, chunk_size=chunk_size, progress=False)
    out = _read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in out] == [f"d{i}" for i in range(N)]
    assert [r["meta"] for r in out] == [{"page": i} for i in range(N)]
    _assert_protected(np.asarray([r["embedding"] for r in out], dtype=np.float32), x)
    assert max(rec.sizes) <= chunk_size
    _only(tmp_path, "in.jsonl", "out.jsonl")


def test_jsonl_output_field_and_npy_output(protector, x, tmp_path) -> None:
    _write_jsonl(tmp_path / "in.jsonl", [{"emb": v.tolist()} for v in x])
    protect_file(
        tmp_path / "in.jsonl",
        tmp_path / "out.jsonl",
        protector=protector,
        column="emb",
        output_column="protected",
        chunk_size=10,
        progress=False,
    )
    out = _read_jsonl(tmp_path / "out.jsonl")
    assert all(set(r) == {"protected"} for r in out)  # the clean vector does not travel on
    _assert_protected(np.asarray([r["protected"] for r in out], dtype=np.float32), x)
    protect_file(
        tmp_path / "in.jsonl", tmp_path / "out.npy", protector=protector, column="emb", chunk_size=10, progress=False
    )
    _assert_protected(np.load(tmp_path / "out.npy"), x)


def test_jsonl_integer_values_are_numbers(protector, tmp_path) -> None:
    e = np.zeros(384)
    e[3] = 1
    _write_jsonl(tmp_path / "in.jsonl", [{"embedding": [int(v) for v in e]}])
    protect_file(tmp_path / "in.jsonl", tmp_path / "out.npy", protector=protector, progress=False)
    _assert_protected(np.load(tmp_path / "out.npy"), e[None, :])


def test_jsonl_texts(minilm, tmp_path) -> None:
    texts = ["The bank raised rates.", "John Smith lives in Leeds.", "Rain is expected tomorrow."]
    _write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": texts[0]}, texts[1], {"id": 3, "text": texts[2]}])
    protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", chunk_size=2, progress=False)
    out = _read_jsonl(tmp_path / "out.jsonl")
    assert [r["text"] for r in out] == texts and [r.get("id") for r in out] == [1, None, 3]
    _assert_protected(np.asarray([r["embedding"] for r in out], dtype=np.float32), minilm.encode(texts))
    protect_file(tmp_path / "in.jsonl", tmp_path / "out.npy", chunk_size=2, progress=False)
    _assert_protected(np.load(tmp_path / "out.npy"), minilm.encode(texts))


# --------------------------------------------------------------------------- atomicity and errors
def test_invalid_row_in_a_late_npy_chunk_leaves_nothing(protector, x, tmp_path) -> None:
    bad = x.copy()
    bad[21, 3] = np.nan
    np.save(tmp_path / "in.npy", bad)
    with pytest.raises(StreamError) as info:
        protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, chunk_size=5, progress=False)
    msg = str(info.value)
    assert "chunk 4 (rows 20-22)" in msg and "first at row 21" in msg
    assert f"{bad[21, 0]:.4f}" not in msg  # no vector values in messages
    _only(tmp_path, "in.npy")


def test_failure_keeps_an_existing_output_untouched(protector, x, tmp_path) -> None:
    bad = x.copy()
    bad[20] = 0.0
    np.save(tmp_path / "in.npy", bad)
    (tmp_path / "out.npy").write_bytes(b"previous")
    with pytest.raises(StreamError, match=r"all-zero row.*row 20"):
        protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, chunk_size=4, progress=False)
    assert (tmp_path / "out.npy").read_bytes() == b"previous"
    _only(tmp_path, "in.npy", "out.npy")


@pytest.mark.parametrize("suffix", [".parquet", ".npy"])
def test_invalid_row_in_a_late_parquet_chunk_leaves_nothing(protector, x, tmp_path, suffix) -> None:
    bad = x.copy()
    bad[19, 0] = np.inf
    _parquet(tmp_path / "in.parquet", bad)
    with pytest.raises(StreamError, match=r"chunk 3 \(rows 18-22\).*first at row 19"):
        protect_file(
            tmp_path / "in.parquet", tmp_path / f"out{suffix}", protector=protector, chunk_size=6, progress=False
        )
    _only(tmp_path, "in.parquet")


def test_null_and_ragged_parquet_rows_are_named(protector, x, tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [list(map(float, v)) for v in x]
    rows[17] = None
    pq.write_table(pa.table({"embedding": pa.array(rows, type=pa.list_(pa.float32()))}), tmp_path / "in.parquet")
    with pytest.raises(StreamError, match="'embedding' is null at row 17"):
        protect_file(
            tmp_path / "in.parquet", tmp_path / "out.parquet", protector=protector, chunk_size=8, progress=False
        )
    rows[17] = rows[16][:-1]
    pq.write_table(pa.table({"embedding": pa.array(rows, type=pa.list_(pa.float32()))}), tmp_path / "in.parquet")
    with pytest.raises(StreamError, match=r"has 383 values, expected 384.* at row 17"):
        protect_file(
            tmp_path / "in.parquet", tmp_path / "out.parquet", protector=protector, chunk_size=8, progress=False
        )
    _only(tmp_path, "in.parquet")


def test_invalid_line_in_a_late_jsonl_chunk_leaves_nothing(protector, x, tmp_path) -> None:
    records = [{"embedding": v.tolist()} for v in x]
    records[20]["embedding"] = [0.0] * 384  # all-zero vector on line 21
    _write_jsonl(tmp_path / "in.jsonl", records)
    for out in ("out.jsonl", "out.npy"):
        with pytest.raises(StreamError, match=r"chunk 2 \(lines 17-23\).*all-zero row.*first at line 21"):
            protect_file(tmp_path / "in.jsonl", tmp_path / out, protector=protector, chunk_size=8, progress=False)
    _only(tmp_path, "in.jsonl")


def test_bad_json_line_is_named(protector, x, tmp_path) -> None:
    lines = [json.dumps({"embedding": v.tolist()}) for v in x[:6]]
    lines[4] = '{"embedding": [0.1, 0.2'
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(StreamError, match=r"in\.jsonl:5 is not valid JSON"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, chunk_size=2, progress=False)
    _only(tmp_path, "in.jsonl")


def test_jsonl_wrong_dimension_and_missing_field_are_named(protector, x, tmp_path) -> None:
    records = [{"embedding": v.tolist()} for v in x]
    records[13]["embedding"] = records[13]["embedding"][:383]
    _write_jsonl(tmp_path / "in.jsonl", records)
    with pytest.raises(StreamError, match=r"in\.jsonl:14: field 'embedding' has 383 values, expected 384"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, progress=False)
    records[13] = {"id": 13}
    _write_jsonl(tmp_path / "in.jsonl", records)
    with pytest.raises(StreamError, match=r"in\.jsonl:14 has no 'embedding' field"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, progress=False)
    records[13] = {"embedding": ["a"] * 384}
    _write_jsonl(tmp_path / "in.jsonl", records)
    with pytest.raises(StreamError, match=r"in\.jsonl:14: field 'embedding' must be a flat list of numbers"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, progress=False)
    _write_jsonl(tmp_path / "in.jsonl", [{"txt": "hello"}])
    with pytest.raises(StreamError, match=r"in\.jsonl:1 has no 'embedding' field .* and no string 'text' field"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, progress=False)
    _only(tmp_path, "in.jsonl")


def test_wrong_dimension(protector, tmp_path) -> None:
    np.save(tmp_path / "in.npy", np.ones((3, 10), dtype=np.float32))
    with pytest.raises(StreamError, match="dimension 10, expected 384"):
        protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, progress=False)
    _write_jsonl(tmp_path / "in.jsonl", [{"embedding": [0.5] * 10}])
    with pytest.raises(StreamError, match="dimension 10, expected 384"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", protector=protector, progress=False)
    _only(tmp_path, "in.npy", "in.jsonl")


def test_missing_column(protector, x, tmp_path) -> None:
    _parquet(tmp_path / "in.parquet", x)
    with pytest.raises(
        StreamError,
        match=r"no column 'vec' nor a text column 'text'; its columns are \['id', "
        r"'embedding'\]",
    ):
        protect_file(
            tmp_path / "in.parquet", tmp_path / "out.parquet", protector=protector, column="vec", progress=False
        )
    _only(tmp_path, "in.parquet")


@pytest.mark.parametrize(
    ("src", "dst", "match"),
    [
        ("in.parquet", "out.jsonl", "cannot write .parquet input to .jsonl"),
        ("in.jsonl", "out.parquet", "cannot write .jsonl input to .parquet"),
        ("in.npy", "out.csv", "unsupported output file type '.csv'"),
        ("in.txt", "out.npy", "unsupported input file type '.txt'"),
        ("in.PARQUET", "out.JSONL", "cannot write .parquet input to .jsonl"),
    ],
)
def test_unsupported_conversions(protector, tmp_path, src, dst, match) -> None:
    (tmp_path / src).write_text("{}\n")
    with pytest.raises(StreamError, match=match):
        protect_file(tmp_path / src, tmp_path / dst, protector=protector, progress=False)
    assert (Path(src).suffix, Path(dst).suffix) not in SUPPORTED_CONVERSIONS
    _only(tmp_path, src)


def test_missing_input_and_same_path(protector, x, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        protect_file(tmp_path / "none.npy", tmp_path / "out.npy", protector=protector, progress=False)
    np.save(tmp_path / "in.npy", x)
    with pytest.raises(StreamError, match="is the input file"):
        protect_file(tmp_path / "in.npy", tmp_path / "in.npy", protector=protector, progress=False)
    np.testing.assert_array_equal(np.load(tmp_path / "in.npy"), x)


def test_empty_inputs_are_refused(protector, tmp_path) -> None:
    np.save(tmp_path / "in.npy", np.zeros((0, 384), dtype=np.float32))
    with pytest.raises(StreamError, match="no rows"):
        protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, progress=False)
    (tmp_path / "in.jsonl").write_text("\n  \n")
    with pytest.raises(StreamError, match="no records"):
        protect_file(tmp_path / "in.jsonl", tmp_path / "out.npy", protector=protector, progress=False)
    _only(tmp_path, "in.npy", "in.jsonl")


def test_progress_bar_shows_the_total(protector, x, tmp_path, capsys) -> None:
    np.save(tmp_path / "in.npy", x)
    protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, chunk_size=5, progress=True)
    assert f"{N}/{N}" in capsys.readouterr().err
    protect_file(tmp_path / "in.npy", tmp_path / "out2.npy", protector=protector, chunk_size=5, progress=False)
    assert f"{N}/{N}" not in capsys.readouterr().err


# --------------------------------------------------------------------------- suffixes in any case, errors
def _vectors_of(path: Path) -> np.ndarray:
    if path.suffix.lower() == ".npy":
        return np.load(path)
    if path.suffix.lower() == ".parquet":
        pq = pytest.importorskip("pyarrow.parquet")
        return np.asarray(pq.read_table(path)["embedding"].to_pylist(), dtype=np.float32)
    return np.asarray([r["embedding"] for r in _read_jsonl(path)], dtype=np.float32)


@pytest.mark.parametrize(
    ("src", "dst"),
    [("in.NPY", "out.Npy"), ("in.Npy", "out.PARQUET"), ("in.NPY", "out.JSONL"), ("in.Parquet", "out.PARQUET"),
     ("in.PARQUET", "out.NPY"), ("in.JSONL", "out.JsonL"), ("in.JsonL", "out.NPY")],
)  # fmt: skip
def test_suffixes_in_any_case(protector, x, tmp_path, src, dst) -> None:
    if src.lower().endswith(".npy"):
        with (tmp_path / src).open("wb") as fh:  # np.save(path) would append ".npy" to "in.NPY"
            np.save(fh, x)
    elif src.lower().endswith(".parquet"):
        _parquet(tmp_path / src, x)
    else:
        _write_jsonl(tmp_path / src, [{"id": i, "embedding": v.tolist()} for i, v in enumerate(x)])
    report = protect_file(tmp_path / src, tmp_path / dst, protector=protector, chunk_size=6, progress=False)
    assert report.rows == N
    _assert_protected(_vectors_of(tmp_path / dst), x)
    _only(tmp_path, src, dst)


def test_file_errors_are_stream_errors_and_vector_file_errors(protector, tmp_path) -> None:
    (tmp_path / "in.npy").write_bytes(b"garbage")
    with pytest.raises(StreamError, match=r"not a readable \.npy array") as info:
        protect_file(tmp_path / "in.npy", tmp_path / "out.npy", protector=protector, progress=False)
    with pytest.raises(FileNotFoundError) as missing:
        protect_file(tmp_path / "none.npy", tmp_path / "out.npy", protector=protector, progress=False)
    assert isinstance(info.value, VectorFileError) and isinstance(missing.value, VectorFileError)
    _only(tmp_path, "in.npy")
