"""``protect_batch`` / ``column_to_matrix`` over numpy dicts, pyarrow Tables and pandas DataFrames.

Also the Ray Data callable :class:`~textcrafter_rag.ray_data.Protect` called directly (no cluster).
"""

from __future__ import annotations

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag import Protector
from textcrafter_rag.batches import column_to_matrix, matrix_to_arrow, protect_batch
from textcrafter_rag.encoders import Encoder
from textcrafter_rag.testing import RecordingMechanism

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

DIM = 32
EPS = 2.5


def _fake_encoder(dim: int = DIM) -> Encoder:
    def fn(texts):
        out = np.stack([np.random.default_rng(sum(map(ord, t)) * 7919 + len(t)).standard_normal(dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)

    return Encoder(fn, dimension=dim, model_id="fake")


def _vectors(n: int = 40, dim: int = DIM, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def recorder() -> RecordingMechanism:
    return RecordingMechanism(make_textcrafter(DIM, eps=EPS))


@pytest.fixture
def protector(recorder: RecordingMechanism) -> Protector:
    return Protector(base=_fake_encoder(), mechanism=recorder, chunk_size=16)


def _assert_protected(out: np.ndarray, x: np.ndarray, recorder: RecordingMechanism) -> None:
    """TextCrafter's invariants, row by row: norm exactly eps, orthogonal to the policy direction v."""
    assert out.shape == x.shape and out.dtype == np.float32
    assert np.isfinite(out).all()
    d = out.astype(np.float64) - x.astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), EPS, rtol=1e-5)
    v = recorder.inner.policy_outputs(x).v.astype(np.float64)
    assert np.abs(np.sum(d * v, axis=1)).max() < 1e-4
    assert len({r.tobytes() for r in d}) == len(d)  # fresh noise per row
    np.testing.assert_array_equal(recorder.all_outputs(), out)  # exactly what the mechanism released


# --------------------------------------------------------------------------- numpy dicts
def test_numpy_dict_replaces_the_column_and_passes_others_through(protector, recorder) -> None:
    x = _vectors()
    ids = np.arange(100, 140)
    texts = np.array([f"doc {i}" for i in range(40)], dtype=object)
    batch = {"id": ids, "embedding": x.copy(), "text": texts}
    out = protect_batch(protector, batch)
    assert list(out) == ["id", "embedding", "text"]
    assert out["id"] is ids and out["text"] is texts
    np.testing.assert_array_equal(batch["embedding"], x)  # the input batch is untouched
    _assert_protected(out["embedding"], x, recorder)
    assert sum(len(b) for b in recorder.inputs) == 40  # chunk_size 16: three chunks, each row once


def test_output_column_keeps_the_clean_vectors(protector, recorder) -> None:
    x = _vectors(8)
    out = protect_batch(protector, {"embedding": x}, output_column="protected")
    assert set(out) == {"embedding", "protected"}
    assert out["embedding"] is x
    _assert_protected(out["protected"], x, recorder)


def test_object_column_of_vectors_and_float64(protector, recorder) -> None:
    """Ray's numpy format gives an object array of 1-D arrays for an Arrow list column."""
    x = _vectors(6)
    col = np.empty(6, dtype=object)
    for i, row in enumerate(x.astype(np.float64)):
        col[i] = row
    np.testing.assert_array_equal(column_to_matrix(col), x)
    out = protect_batch(protector, {"vec": col}, column="vec")
    _assert_protected(out["vec"], x, recorder)


# --------------------------------------------------------------------------- pyarrow
def _fixed(x: np.ndarray):
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])


def test_arrow_fixed_size_list_chunked(protector, recorder) -> None:
    x = _vectors(30)
    col = pa.chunked_array([_fixed(x[:7]), _fixed(x[7:20]), _fixed(x[20:])])
    table = pa.table({"id": pa.array(np.arange(30)), "embedding": col, "meta": pa.array([str(i) for i in range(30)])})
    np.testing.assert_array_equal(column_to_matrix(col), x)
    out = protect_batch(protector, table)
    assert isinstance(out, pa.Table)
    assert out.column_names == ["id", "embedding", "meta"]
    assert pa.types.is_fixed_size_list(out.schema.field("embedding").type)
    assert out.schema.field("embedding").type.list_size == DIM
    assert out["id"].to_pylist() == list(range(30)) and out["meta"].equals(table["meta"])
    np.testing.assert_array_equal(column_to_matrix(table["embedding"]), x)  # input untouched
    _assert_protected(column_to_matrix(out["embedding"]), x, recorder)


def test_arrow_list_column_sliced_and_new_output_column(protector, recorder) -> None:
    x = _vectors(12)
    full = pa.array([list(map(float, r)) for r in x], type=pa.list_(pa.float64()))
    table = pa.table({"embedding": full}).slice(3, 6)  # offsets do not start at 0
    np.testing.assert_array_equal(column_to_matrix(table["embedding"]), x[3:9])
    out = protect_batch(protector, table, output_column="protected")
    assert out.column_names == ["embedding", "protected"]
    assert out["embedding"].equals(table["embedding"])
    assert out.schema.field("protected").type == pa.list_(pa.float32())  # a list column stays a list column
    _assert_protected(column_to_matrix(out["protected"]), x[3:9], recorder)


def test_arrow_large_list_and_record_batch(protector, recorder) -> None:
    x = _vectors(5)
    rb = pa.record_batch({"embedding": pa.array([list(r) for r in x], type=pa.large_list(pa.float32()))})
    out = protect_batch(protector, rb)
    assert out.schema.field("embedding").type == pa.large_list(pa.float32())
    _assert_protected(column_to_matrix(out["embedding"]), x, recorder)


def test_ray_tensor_column_keeps_its_type(protector, recorder) -> None:
    ext = pytest.importorskip("ray.data.extensions")
    x = _vectors(9)
    col = pa.chunked_array([ext.ArrowTensorArray.from_numpy(x[:4]), ext.ArrowTensorArray.from_numpy(x[4:])])
    out = protect_batch(protector, pa.table({"embedding": col}))
    assert out.schema.field("embedding").type == col.type
    _assert_protected(column_to_matrix(out["embedding"]), x, recorder)


def test_matrix_to_arrow_round_trip() -> None:
    x = _vectors(4).astype(np.float64)
    arr = matrix_to_arrow(x)
    assert arr.type == pa.list_(pa.float32(), DIM)
    np.testing.assert_array_equal(column_to_matrix(arr), x.astype(np.float32))
    lst = matrix_to_arrow(x, like=pa.array([[1.0]], type=pa.list_(pa.float64())))
    assert lst.type == pa.list_(pa.float32())
    np.testing.assert_array_equal(column_to_matrix(lst), x.astype(np.float32))


# --------------------------------------------------------------------------- pandas
def test_pandas_series_of_vectors(protector, recorder) -> None:
    x = _vectors(10)
    df = pd.DataFrame({"id": np.arange(10), "embedding": list(x)}, index=np.arange(50, 60))
    out = protect_batch(protector, df)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["id", "embedding"]
    assert list(out.index) == list(range(50, 60)) and list(out["id"]) == list(range(10))
    np.testing.assert_array_equal(np.stack(df["embedding"].to_list()), x)  # input untouched
    _assert_protected(np.stack(out["embedding"].to_list()), x, recorder)


# --------------------------------------------------------------------------- text columns
def test_text_column_is_embedded_then_protected(protector, recorder) -> None:
    texts = [f"document number {i} about topic {i % 3}" for i in range(9)]
    clean = _fake_encoder().encode(texts)
    for batch in (
        {"id": np.arange(9), "text": np.array(texts)},
        pa.table({"id": np.arange(9), "text": texts}),
        pd.DataFrame({"id": np.arange(9), "text": texts}),
    ):
        recorder.inputs.clear()
        recorder.outputs.clear()
        out = protect_batch(protector, batch, text_column="text")
        if isinstance(out, pa.Table):
            assert out.column_names == ["id", "text", "embedding"]
            vec = column_to_matrix(out["embedding"])
        elif isinstance(out, pd.DataFrame):
            assert list(out.columns) == ["id", "text", "embedding"]
            vec = np.stack(out["embedding"].to_list())
        else:
            assert list(out) == ["id", "text", "embedding"]
            vec = out["embedding"]
        np.testing.assert_array_equal(recorder.inputs[0], clean)  # the mechanism saw the encoder's vectors
        _assert_protected(vec, clean, recorder)


def test_embedding_column_wins_over_text_column(protector, recorder) -> None:
    x = _vectors(3)
    out = protect_batch(protector, {"embedding": x, "text": np.array(["a b", "c d", "e f"])}, text_column="text")
    _assert_protected(out["embedding"], x, recorder)


def test_bad_texts_are_refused(protector, recorder) -> None:
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        protect_batch(protector, pa.table({"text": ["ok", None]}), text_column="text")
    with pytest.raises(ValueError, match=r"texts\[0\] is empty"):
        protect_batch(protector, {"text": np.array(["  ", "ok"])}, text_column="text")
    assert recorder.inputs == []


# --------------------------------------------------------------------------- empty batches
def test_empty_batches_give_empty_columns(protector, recorder) -> None:
    out = protect_batch(protector, {"id": np.arange(0), "embedding": np.empty((0, DIM), np.float32)})
    assert out["embedding"].shape == (0, DIM) and out["embedding"].dtype == np.float32
    fixed = protect_batch(protector, pa.table({"embedding": pa.array([], type=pa.list_(pa.float64(), DIM))}))
    assert fixed.num_rows == 0 and fixed.schema.field("embedding").type == pa.list_(pa.float32(), DIM)
    listed = protect_batch(protector, pa.table({"embedding": pa.array([], type=pa.list_(pa.float32()))}))
    assert listed.num_rows == 0 and listed.schema.field("embedding").type == pa.list_(pa.float32())
    assert protect_batch(protector, {"text": np.array([], dtype=object)}, text_column="text")["embedding"].shape == (
        0,
        DIM,
    )
    assert recorder.inputs == []


# --------------------------------------------------------------------------- errors
def test_missing_column_names_the_columns(protector) -> None:
    with pytest.raises(KeyError, match=r"no column 'embedding'; its columns are \['id', 'vec'\]"):
        protect_batch(protector, {"id": np.arange(2), "vec": _vectors(2)})
    with pytest.raises(KeyError, match=r"'embedding' or 'text'.*\['id'\]"):
        protect_batch(protector, pa.table({"id": [1, 2]}), text_column="text")
    with pytest.raises(TypeError, match=r"pyarrow\.Table or a pandas\.DataFrame"):
        protect_batch(protector, _vectors(2))


def _bad_batches() -> list[tuple[str, object, type[Exception], str]]:
    x = _vectors(6)
    nan = x.copy()
    nan[4, 2] = np.nan
    ragged = pa.array([list(r) for r in x[:3]] + [list(x[3, :-1])], type=pa.list_(pa.float32()))
    nulls = pa.array([list(r) for r in x[:3]] + [None], type=pa.list_(pa.float32(), DIM))
    obj_none = np.empty(3, dtype=object)
    obj_none[:] = [x[0], None, x[2]]
    obj_ragged = np.empty(2, dtype=object)
    obj_ragged[:] = [x[0], x[1, :-2]]
    child_null = pa.array([list(r) for r in x[:2]] + [[None] * DIM], type=pa.list_(pa.float32(), DIM))
    return [
        (
            "nan",
            {"embedding": nan},
            ValueError,
            r"column 'embedding' contains NaN or Inf in 1 row\(s\), first at row 4",
        ),
        (
            "inf-pandas",
            pd.DataFrame({"embedding": list(np.where(np.arange(DIM) == 0, np.inf, x))}),
            ValueError,
            "NaN or Inf in 6 row",
        ),
        ("wrong-dim", {"embedding": _vectors(3, dim=DIM + 1)}, ValueError, f"dimension {DIM + 1}, expected {DIM}"),
        ("1-d", {"embedding": x[0]}, ValueError, "must be 2-D"),
        ("ints", {"embedding": np.ones((2, DIM), dtype=np.int64)}, TypeError, "floating-point dtype"),
        (
            "zero-row",
            {"embedding": np.vstack([x[:2], np.zeros((1, DIM), np.float32)])},
            ValueError,
            "all-zero row.*first at row 2",
        ),
        ("arrow-ragged", pa.table({"embedding": ragged}), TypeError, "'embedding' has rows of different lengths"),
        ("arrow-nulls", pa.table({"embedding": nulls}), TypeError, r"'embedding' has 1 null row\(s\)"),
        ("arrow-child-null", pa.table({"embedding": child_null}), ValueError, "NaN or Inf in 1 row.*first at row 2"),
        ("object-none", {"embedding": obj_none}, TypeError, "'embedding' has null row"),
        ("object-ragged", {"embedding": obj_ragged}, TypeError, "different lengths"),
        ("pandas-none", pd.DataFrame({"embedding": [x[0], None]}), TypeError, "null row"),
    ]


@pytest.mark.parametrize("case", _bad_batches(), ids=lambda c: c[0])
def test_invalid_columns_raise_and_protect_nothing(case, protector, recorder) -> None:
    _, batch, exc, pattern = case
    before = batch.copy() if hasattr(batch, "copy") else None
    with pytest.raises(exc, match=pattern) as info:
        protect_batch(protector, batch)
    assert recorder.inputs == [] and recorder.outputs == []  # not a single row went through the mechanism
    assert "0.0" not in str(info.value)  # no vector values in the message
    if isinstance(batch, dict):
        assert set(batch) == {"embedding"} and batch["embedding"] is not None
    elif isinstance(batch, pd.DataFrame):
        assert batch.equals(before)


def test_a_bad_row_in_a_late_chunk_releases_nothing(protector, recorder) -> None:
    x = _vectors(40)
    x[37, 0] = np.inf  # chunk_size is 16: the third chunk is the bad one
    with pytest.raises(ValueError, match="first at row 37"):
        protect_batch(protector, {"embedding": x})
    assert recorder.inputs == []


# --------------------------------------------------------------------------- Protect without a cluster
def test_protect_callable_with_the_shipped_policy() -> None:
    from textcrafter_rag.policies import shipped_policy_path
    from textcrafter_rag.ray_data import Protect
    from textcrafter_rag.textcrafter import TextCrafter

    path = shipped_policy_path("sentence-transformers/all-MiniLM-L6-v2")
    assert path is not None
    first, second = Protect(mechanism=str(path)), Protect(mechanism=str(path))
    assert first.protector.mechanism.eps == 1.0 and not first.protector.mechanism.secure_mode
    x = _vectors(64, dim=384, seed=3)
    x[32:] = x[:32]  # duplicate inputs within a batch
    a = first({"id": np.arange(64), "embedding": x})
    b = second({"id": np.arange(64), "embedding": x})
    np.testing.assert_array_equal(a["id"], np.arange(64))
    v = TextCrafter.load(path).policy_outputs(x).v.astype(np.float64)
    for out in (a["embedding"], b["embedding"]):
        d = out.astype(np.float64) - x
        np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, rtol=1e-5)
        assert np.abs(np.sum(d * v, axis=1)).max() < 1e-4
    # two actors, same input: no shared noise stream, and duplicates within a batch differ too
    assert not np.isclose(a["embedding"], b["embedding"], atol=1e-3).all(axis=1).any()
    assert not np.isclose(a["embedding"][:32], a["embedding"][32:], atol=1e-3).all(axis=1).any()
    secure = Protect(mechanism=str(path), secure_mode=True)
    assert secure.protector.mechanism.secure_mode


def test_protect_callable_refuses_text_column_without_encoder() -> None:
    from textcrafter_rag.ray_data import Protect

    with pytest.raises(ValueError, match="text_column needs encoder"):
        Protect(text_column="text")
