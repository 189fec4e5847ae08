"""``textcrafter_rag.audit.store``: reading a store sample, and finding the plaintext that sits beside the vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from textcrafter_rag.audit.store import (
    AuditInputError,
    StoreSample,
    is_natural_language,
    load_sample,
    plaintext_columns,
    read_store_vectors,
    read_texts,
    store_rows,
)
from textcrafter_rag.errors import VectorFileError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N, D = 30, 8
PROSE = [
    "The central bank raised interest rates by half a point on Thursday.",
    "John Smith moved to Leeds after selling the family bakery in 2019.",
    "Rain is expected across the north of England tomorrow afternoon.",
    "Shares in the retailer fell sharply after a profit warning.",
    "Il pleut à Paris depuis trois jours, et la Seine a débordé.",
]
NOT_PROSE = [
    "doc-000123",
    "3f2a9c0b7e5d41aa9c3e0f1d2b4a6c8e",
    "https://example.com/news/2024/05/01/rates-rise-again.html",
    "business",
    "Arts & Entertainment",
    "John Smith",
    "42",
    "3.14159",
    "2024-05-01T12:00:00Z",
    "550e8400-e29b-41d4-a716-446655440000",
    "/data/docs/report_final_v2.pdf",
    "",
    "   ",
    "a1 b2 c3 d4 e5 f6",
    "12 34 56 78 90",
    "SKU 1234 5678 9012 3456",
]


def _x(n: int = N) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((n, D)).astype(np.float32)


def _texts(n: int = N) -> list[str]:
    return [PROSE[i % len(PROSE)] for i in range(n)]


def _parquet(path: Path, **columns) -> Path:
    x = _x()
    emb = pa.array([list(map(float, v)) for v in x], type=pa.list_(pa.float32()))
    pq.write_table(pa.table({"embedding": emb, **columns}), path, row_group_size=7)
    return path


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _records(**fields) -> list[dict]:
    """One record per store row: the embedding plus ``fields[name][i]`` for every given field."""
    return [{"embedding": v.tolist(), **{k: vals[i] for k, vals in fields.items()}} for i, v in enumerate(_x())]


def _ids(n: int = N) -> dict[str, list]:
    return {
        "id": [f"doc-{i:06d}" for i in range(n)],
        "category": [["sport", "business", "tech"][i % 3] for i in range(n)],
        "url": [f"https://example.com/articles/{i}/the-bank-raised-rates" for i in range(n)],
        "sha": [f"{i:064x}" for i in range(n)],
    }


# --------------------------------------------------------------------------- what reads as prose
@pytest.mark.parametrize("text", PROSE)
def test_prose_is_natural_language(text) -> None:
    assert is_natural_language(text)


@pytest.mark.parametrize("text", NOT_PROSE)
def test_ids_hashes_urls_labels_and_numbers_are_not(text) -> None:
    assert not is_natural_language(text)


# --------------------------------------------------------------------------- stores with and without plaintext
def test_parquet_text_column_is_flagged(tmp_path) -> None:
    path = _parquet(tmp_path / "s.parquet", **_ids(), text=_texts())
    sample = load_sample(path, n=10, progress=False)
    assert sample.plaintext_columns == ("text",)
    assert sample.vectors.shape == (10, D)


def test_parquet_with_only_ids_categories_urls_and_hashes_is_not_flagged(tmp_path) -> None:
    path = _parquet(tmp_path / "s.parquet", **_ids(), score=np.arange(N) * 0.5)
    assert load_sample(path, n=10, progress=False).plaintext_columns == ()


def test_jsonl_text_field_is_flagged_and_id_fields_are_not(tmp_path) -> None:
    assert load_sample(
        _jsonl(tmp_path / "a.jsonl", _records(**_ids(), body=_texts())), n=12, progress=False
    ).plaintext_columns == ("body",)
    assert load_sample(_jsonl(tmp_path / "b.jsonl", _records(**_ids())), n=12, progress=False).plaintext_columns == ()


@pytest.mark.parametrize("key", ["page_content", "text"])
def test_jsonl_metadata_dict_holding_the_document_is_flagged(tmp_path, key) -> None:
    meta = [{"source": f"https://example.com/{i}", "page": i, key: t} for i, t in enumerate(_texts())]
    sample = load_sample(_jsonl(tmp_path / "s.jsonl", _records(id=list(range(N)), metadata=meta)), progress=False)
    assert sample.plaintext_columns == (f"metadata.{key}",)


def test_parquet_struct_and_json_string_metadata_are_flagged(tmp_path) -> None:
    texts = _texts()
    struct = pa.array([{"page": i, "page_content": t} for i, t in enumerate(texts)])
    as_json = [json.dumps({"source": f"s{i}.pdf", "text": t}) for i, t in enumerate(texts)]
    path = _parquet(tmp_path / "s.parquet", meta=struct, payload=as_json, **_ids())
    assert load_sample(path, n=15, progress=False).plaintext_columns == ("meta.page_content", "payload.text")


def test_parquet_map_column_is_flagged_by_key(tmp_path) -> None:
    maps = pa.array(
        [[("source", f"s{i}.pdf"), ("page_content", t)] for i, t in enumerate(_texts())],
        type=pa.map_(pa.string(), pa.string()),
    )
    assert load_sample(_parquet(tmp_path / "s.parquet", meta=maps), progress=False).plaintext_columns == (
        "meta.page_content",
    )


def test_a_column_with_rare_prose_is_not_flagged() -> None:
    labels = ["business", "sport", "tech", "politics"] * 5
    assert plaintext_columns({"label": labels}) == ()
    assert plaintext_columns({"label": [*labels[:16], *PROSE[:4]]}) == ()  # 4 of 20
    assert plaintext_columns({"label": [*labels[:10], *(PROSE * 2)]}) == ("label",)  # 10 of 20
    assert plaintext_columns({"x": [None, 3, {"a": [1, 2]}]}) == ()


def test_npy_store_has_no_plaintext_columns(tmp_path) -> None:
    np.save(tmp_path / "s.npy", _x())
    sample = load_sample(tmp_path / "s.npy", n=5, progress=False)
    assert isinstance(sample, StoreSample) and sample.plaintext_columns == ()


# --------------------------------------------------------------------------- suffixes, errors
@pytest.mark.parametrize("name", ["s.NPY", "s.Parquet", "s.JSONL"])
def test_upper_case_stores_and_texts_files(tmp_path, name) -> None:
    x, path = _x(), tmp_path / name
    if name.lower().endswith(".npy"):
        with path.open("wb") as fh:
            np.save(fh, x)
    elif name.lower().endswith(".parquet"):
        _parquet(path, text=_texts())
    else:
        _jsonl(path, _records(text=_texts()))
    texts = _jsonl(tmp_path / "t.JSONL", [{"text": t} for t in _texts(12)])
    sample = load_sample(path, texts=texts, n=5, seed=2, progress=False)
    assert store_rows(path) == N and sample.n_texts == 12 and sample.indices.max() < 12
    np.testing.assert_allclose(sample.vectors, x[sample.indices], rtol=1e-6)
    assert sample.texts == [_texts()[i] for i in sample.indices]
    assert sample.plaintext_columns == (() if name.endswith("NPY") else ("text",))


def test_read_rows_checks_floats_and_names_the_row_with_nan(tmp_path) -> None:
    x = _x()
    x[11, 2] = np.nan
    np.save(tmp_path / "s.npy", x)
    np.testing.assert_array_equal(read_store_vectors(tmp_path / "s.npy", np.array([1, 2]), progress=False), x[[1, 2]])
    with pytest.raises(AuditInputError, match="NaN or Inf in sampled row 11"):
        read_store_vectors(tmp_path / "s.npy", np.array([3, 11]), progress=False)
    np.save(tmp_path / "i.npy", np.ones((3, 4), dtype=np.int64))
    with pytest.raises(AuditInputError, match="does not hold float vectors"):
        read_store_vectors(tmp_path / "i.npy", np.array([0]), progress=False)


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda p: None, "store .*none.npy does not exist"),
        (lambda p: (p / "none.npy").write_bytes(b"junk"), "not a readable .npy array"),
        (lambda p: (p / "none.npy").mkdir(), "is not a file"),
    ],
)
def test_store_errors_are_audit_input_errors(tmp_path, setup, match) -> None:
    setup(tmp_path)
    with pytest.raises(AuditInputError, match=match) as info:
        load_sample(tmp_path / "none.npy", progress=False)
    assert isinstance(info.value, VectorFileError)


def test_texts_file_errors(tmp_path) -> None:
    with pytest.raises(AuditInputError, match=r"must be \.jsonl"):
        read_texts(_parquet(tmp_path / "t.parquet", text=_texts()))
    with pytest.raises(AuditInputError, match="is empty"):
        read_texts(_jsonl(tmp_path / "e.jsonl", []))
    with pytest.raises(AuditInputError, match=r"b\.jsonl:2 has no non-empty string 'text' field"):
        read_texts(_jsonl(tmp_path / "b.jsonl", [{"text": "ok"}, {"text": ""}]))
    (tmp_path / "j.jsonl").write_text('{"text": "ok"}\n{"text": "Jane\n')
    with pytest.raises(AuditInputError, match=r"j\.jsonl:2 is not valid JSON") as info:
        read_texts(tmp_path / "j.jsonl")
    assert "Jane" not in str(info.value)


def test_the_report_names_record_ids_keyed_or_clear(tmp_path) -> None:
    """Issue 29.2: a sealed store's ids are named keyed (the default) or clear, and clear ones are flagged."""
    from textcrafter_rag.audit.measures import diagnose
    from textcrafter_rag.sealed.records import RecordSealer
    from textcrafter_rag.sealing import generate_key

    key = generate_key()

    def rows(records: RecordSealer) -> list[dict]:
        sealed = [records.seal(t, {"ward": "3"}, record_id=f"patient-{i}") for i, t in enumerate(_texts())]
        return _records(
            id=[str(s.store_id) for s in sealed], text=[s.text for s in sealed], metadata=[s.metadata for s in sealed]
        )

    keyed = load_sample(_jsonl(tmp_path / "keyed.jsonl", rows(RecordSealer(key))), n=10, progress=False)
    clear = load_sample(
        _jsonl(tmp_path / "clear.jsonl", rows(RecordSealer(key, record_ids="clear"))), n=10, progress=False
    )
    assert (keyed.record_ids, clear.record_ids) == ("keyed", "clear")
    assert load_sample(_jsonl(tmp_path / "plain.jsonl", _records(**_ids())), n=10, progress=False).record_ids is None
    for sample, words in ((keyed, "keyed"), (clear, "in clear")):
        notes: list[str] = []
        diag, _, _ = diagnose(sample, None, None, model_id="m", progress=False, notes=notes)
        assert diag["record_ids"] == sample.record_ids and any(f"Record ids are {words}" in n for n in notes)
        assert sample.clear_fields == ("metadata.ward",)  # plain metadata is still named
