"""Issue 28, items 4, 5, 6 and 9: filters in every form, keys echoed by argparse, pickling, ciphertext length.

Each test failed on the code before its fix. They need no network, no model and no privilege (they pass as root).
"""

from __future__ import annotations

import base64
import copy
import copyreg
import json
import pickle

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from textcrafter_rag.cli import main
from textcrafter_rag.errors import NotPicklableError, TextcrafterError
from textcrafter_rag.keyed import KeyedRotation, TenantKey
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
from textcrafter_rag.sealed.records import RecordSealer, filter_field_names
from textcrafter_rag.sealing import (
    SEALED_PREFIX,
    TEXT_MIN_BYTES,
    VALUE_MIN_BYTES,
    Sealer,
    SealError,
    SecretKey,
    generate_key,
    load_key,
    padded_size,
)

#: A fixed key (a random one would make the command-line cases below depend on its first characters).
KEY = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4A="

# ---------------------------------------------------------------------------------------------------------------
# Item 4: every filter form that names a sealed field is refused, whatever keyword carries it.
# ---------------------------------------------------------------------------------------------------------------

SEALED_EXPRESSIONS = [
    'metadata["author"] == "Jane"',  # LangChain Milvus with a JSON metadata field
    '$meta["author"] == "Jane"',  # Milvus' dynamic field
    "metadata['author'] == 'Jane'",
    'metadata["author"]["city"] == "Leeds"',
    'author == "Jane"',
    'author in ["Jane", "Ann"]',
    'json_contains(author, "Jane")',
    'JSON_CONTAINS_ANY(metadata["author"], ["Jane"])',
    'category == "moves" and (dob like "1980%" or pages > 2)',
    "metadata.author == 'Jane'",
    '{"author": "Jane"}',  # a JSON filter passed as a string
]
PLAIN_EXPRESSIONS = [
    'category == "author"',  # a value equal to a sealed field's name is not a field
    'metadata["category"] == "moves"',
    'category in ["author", "dob"]',
    "authorship == 'x' and pages > 2",
]


@pytest.fixture
def records() -> RecordSealer:
    return RecordSealer(KEY, sealed_metadata=("author", "dob"))


@pytest.mark.parametrize("expr", SEALED_EXPRESSIONS)
def test_string_expressions_naming_a_sealed_field_are_refused(records: RecordSealer, expr: str) -> None:
    with pytest.raises(ValueError, match="cannot filter on sealed") as info:
        records.check_filter(expr)
    assert isinstance(info.value, TextcrafterError) and "Jane" not in str(info.value)


@pytest.mark.parametrize("expr", PLAIN_EXPRESSIONS)
def test_string_expressions_on_plain_fields_pass(records: RecordSealer, expr: str) -> None:
    records.check_filter(expr)


def test_subscripted_keys_are_read() -> None:
    assert {"metadata", "author"} <= filter_field_names('metadata["author"] == "Jane"')
    assert "author" in filter_field_names("$meta['author'] == 'Jane'")
    assert "Jane" not in filter_field_names('author == "Jane"')  # values are not names


@pytest.mark.parametrize(
    "flt",
    [
        {'metadata["author"]': "Jane"},  # a key written as a path, in a dict ...
        {"must": [{"key": "$meta['author']", "match": {"value": "Jane"}}]},  # ... or as a key value
        {"path": ["author"], "operator": "Equal", "valueText": "Jane"},  # Weaviate v3 where filter
        {"bool": {"filter": [{"term": {"doc.author.keyword": "Jane"}}]}},
    ],
)
def test_keys_written_as_paths_are_read(records: RecordSealer, flt: dict) -> None:
    with pytest.raises(ValueError, match="cannot filter on sealed"):
        records.check_filter(flt)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"expr": 'author == "Jane"'},  # LangChain Milvus: the filter is expr=
        {"expr": 'metadata["author"] == "Jane"'},
        {"where": {"author": "Jane"}},  # Chroma
        {"where": {"$and": [{"topic": "x"}, {"$or": [{"dob": {"$eq": "1980"}}]}]}},
        {"filter": {"author": "Jane"}},
        {"filter": 'author == "Jane"'},
        {"qdrant_filters": {"must": [{"key": "metadata.author", "match": {"value": "Jane"}}]}},
        {"pre_filter": {"author": {"$eq": "Jane"}}},  # MongoDB Atlas
        {"where_filter": {"path": ["author"], "operator": "Equal"}},  # Weaviate v3 style
        {"Filter_Expr": "dob > 1980"},  # any case
        {"k": 4, "expr": "category == 'x'", "filters": [{"author": "Jane"}]},
    ],
)
def test_every_filter_keyword_is_checked(records: RecordSealer, kwargs: dict) -> None:
    with pytest.raises(ValueError, match="cannot filter on sealed") as info:
        records.check_store_kwargs(kwargs)
    assert "Jane" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs", [{"where_document": {"$contains": "Jane"}}, {"body_search": "Jane"}, {"expr": 'text like "%Jane%"'}]
)
def test_searches_over_the_sealed_text_are_refused(records: RecordSealer, kwargs: dict) -> None:
    with pytest.raises(ValueError, match="sealed") as info:
        records.check_store_kwargs(kwargs)
    assert "Jane" not in str(info.value)


def test_plain_store_keywords_pass(records: RecordSealer) -> None:
    records.check_store_kwargs({})
    records.check_store_kwargs(
        {"expr": 'category == "author"', "where": {"topic": "x"}, "filter": None, "where_document": None}
    )
    records.check_store_kwargs({"k": 4, "fetch_k": 20, "param": {"author": 1}, "score_threshold": 0.2})


# ---------------------------------------------------------------------------------------------------------------
# Item 5: argparse never echoes a key-looking value (a flag that does not exist, an abbreviation, a stray value).
# ---------------------------------------------------------------------------------------------------------------

DASH_KEY = "-" + KEY[1:]  # a key can start with "-" (URL-safe base64): argparse then reads it as an option


@pytest.mark.parametrize(
    "argv",
    [
        ["keygen", f"--key={KEY}"],
        ["keygen", f"--ke={KEY}"],
        ["protect", f"--key={KEY}", "--input", "a.npy", "--output", "b.npy"],  # ambiguous: --key-file/--key-env
        ["rekey", "a.npy", "b.npy", "--key-file", "k", f"--new-key={KEY}"],
        ["protect", "--input", "a.npy", "--output", "b.npy", KEY],  # unrecognized arguments
        ["protect", "--input", "a.npy", "--output", "b.npy", DASH_KEY],
        ["protect", "--input", "a.npy", "--output", "b.npy", "-h" + KEY[2:]],  # "-h", then the rest as its value
        ["protect", "--input", "a.npy", "--output", "b.npy", f"-{KEY}"],
        ["protect", "--chunk-size", KEY, "--input", "a.npy", "--output", "b.npy"],  # invalid int value
        ["protect", f"--secure={KEY}", "--input", "a.npy", "--output", "b.npy"],  # ignored explicit argument
        [KEY],  # invalid choice
        ["fit", "--out", "x", "--eps", KEY],
    ],
)
def test_argparse_errors_never_print_a_key(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    printed = out.out + out.err
    assert info.value.code == 2 and "error:" in printed and "<redacted>" in printed
    for secret in (KEY, KEY[:-1], KEY[1:30], KEY[2:30]):  # no part of it either ("-hKEY" is "-h" and "KEY")
        assert secret not in printed


def test_argparse_errors_keep_option_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["keygen", "--frobnicate=hunter2", "stray"])
    err = capsys.readouterr().err
    assert "--frobnicate=<redacted>" in err and "hunter2" not in err and "stray" not in err


def test_a_key_given_as_a_fingerprint_is_not_printed(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "key").write_text(generate_key())
    (tmp_path / "in.jsonl").write_text('{"embedding": [0.6, 0.8]}\n')
    argv = ["rekey", str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--key-file", str(tmp_path / "key")]
    assert main([*argv, "--new-tenant", "b", "--expect-fingerprint", KEY, "--no-progress"]) == 2
    printed = "".join(capsys.readouterr())
    assert "error:" in printed and KEY not in printed and KEY[:-1] not in printed


# ---------------------------------------------------------------------------------------------------------------
# Item 6: everything holding key material refuses pickling and __getstate__ with NotPicklableError.
# ---------------------------------------------------------------------------------------------------------------


def _holders() -> dict[str, object]:
    return {
        "SecretKey": SecretKey(KEY),
        "Sealer": Sealer(KEY),
        "RecordSealer": RecordSealer(KEY, sealed_metadata=("author",)),
        "KeyedRotation": KeyedRotation(KEY, tenant="acme", dim=8),
        "TwoStage": TwoStage(KEY, search=TwoStageSearch.of(10)),
    }


@pytest.mark.parametrize("name", list(_holders()))
def test_key_holders_refuse_every_way_of_being_serialised(name: str) -> None:
    obj = _holders()[name]
    raw = base64.urlsafe_b64decode(KEY)
    calls = [
        lambda: pickle.dumps(obj),
        lambda: pickle.dumps(obj, protocol=0),
        lambda: obj.__getstate__(),  # the default of a slotted class returns the raw key (Python >= 3.11)
        lambda: obj.__reduce_ex__(2),
        lambda: copyreg._reduce_ex(obj, 1),  # type: ignore[attr-defined]
        lambda: obj.__setstate__({}),
    ]
    for call in calls:
        with pytest.raises(NotPicklableError) as info:
            call()
        assert isinstance(info.value, TypeError) and KEY not in str(info.value) and raw.hex() not in str(info.value)


@pytest.mark.parametrize("name", list(_holders()))
def test_key_holders_copy_as_themselves(name: str) -> None:
    obj = _holders()[name]
    assert copy.copy(obj) is obj and copy.deepcopy(obj) is obj
    assert copy.deepcopy({"x": [obj]})["x"][0] is obj  # objects holding one can still be deep-copied


def test_a_key_read_from_a_file_still_pickles_as_its_reference(tmp_path) -> None:
    (tmp_path / "key").write_text(KEY)
    key = load_key(tmp_path / "key")
    back = pickle.loads(pickle.dumps(TenantKey(key, "acme")))
    assert back.key.subkey("x") == SecretKey(KEY).subkey("x") and KEY not in str(pickle.dumps(key))
    with pytest.raises(NotPicklableError):
        key.__getstate__()


# ---------------------------------------------------------------------------------------------------------------
# Item 9: sealed values are padded, so a token's length tells little about its value; old tokens still open.
# ---------------------------------------------------------------------------------------------------------------


def _plain_len(token: str) -> int:
    """Bytes of padded plaintext in a token: what its length reveals (nonce and tag are constant)."""
    return len(base64.urlsafe_b64decode(token[len(SEALED_PREFIX) :])) - 12 - 16


@pytest.mark.parametrize(
    "values",
    [
        [True, False],
        ["flu", "pancreatic cancer"],
        [5_000, 85_000, 1_250_000, 12_500_000.5],
        ["$5,000", "$85,000", "$1,250,000"],
        [None, "", [], {"a": 1}, "Jane Doe <jane.doe@example.org>"],
    ],
)
def test_metadata_values_of_different_lengths_give_tokens_of_one_length(values: list) -> None:
    s = Sealer(KEY)
    tokens = [s.seal_json(v, record_id="doc-1", field="metadata.x") for v in values]
    assert len({len(t) for t in tokens}) == 1 and _plain_len(tokens[0]) == VALUE_MIN_BYTES
    assert [s.open_json(t, record_id="doc-1", field="metadata.x") for t in tokens] == values


def test_texts_of_nearby_lengths_give_tokens_of_one_length() -> None:
    s = Sealer(KEY)
    short = {len(s.seal("x" * n, record_id="d")) for n in (0, 1, 17, 100, 200, TEXT_MIN_BYTES - 1)}
    longer = {len(s.seal("y" * n, record_id="d")) for n in (TEXT_MIN_BYTES, 300, 400, 511)}
    assert len(short) == 1 and len(longer) == 1 and short != longer
    records = RecordSealer(KEY, sealed_metadata=("diagnosis",))
    a = records.seal("Patient seen on Monday.", {"diagnosis": "flu"}, record_id="p1")
    b = records.seal("Patient seen on Thursday.", {"diagnosis": "pancreatic cancer"}, record_id="p2")
    assert len(a.text) == len(b.text) and len(a.metadata["diagnosis"]) == len(b.metadata["diagnosis"])


def test_size_classes_and_their_boundaries() -> None:
    assert [padded_size(n, minimum=64) for n in (0, 1, 64, 65, 128, 129, 1000)] == [64, 64, 64, 128, 128, 256, 1024]
    assert [padded_size(n, minimum=256) for n in (1, 256, 257, 512, 513, 5000)] == [256, 256, 512, 512, 1024, 8192]
    s = Sealer(KEY)
    # the padding takes one byte at least: 63 bytes of JSON fill the 64-byte class, 64 bytes need the next
    at, over = "a" * (VALUE_MIN_BYTES - 3), "a" * (VALUE_MIN_BYTES - 2)  # JSON adds the two quotes
    assert _plain_len(s.seal_json(at, record_id="r", field="f")) == VALUE_MIN_BYTES
    assert _plain_len(s.seal_json(over, record_id="r", field="f")) == 2 * VALUE_MIN_BYTES
    assert _plain_len(s.seal("é" * 127 + "a", record_id="r")) == TEXT_MIN_BYTES  # 255 bytes and the mark: 256
    assert _plain_len(s.seal("é" * 128, record_id="r")) == 2 * TEXT_MIN_BYTES  # 256 bytes: the next class


@pytest.mark.parametrize("text", ["", "abc\x00", "abc\x00\x00", "\x80", "ends with é", "\u0080" * 200, "z" * 255])
def test_padding_is_unambiguous(text: str) -> None:
    s = Sealer(KEY)
    assert s.open(s.seal(text, record_id="r"), record_id="r") == text
    assert s.open_json(s.seal_json({"v": text}, record_id="r", field="f"), record_id="r", field="f") == {"v": text}


def test_the_version_is_authenticated_and_bad_padding_is_refused() -> None:
    s = Sealer(KEY)
    token = s.seal("Jane Doe", record_id="r")
    with pytest.raises(SealError):  # relabelled as an unpadded v1 token: the associated data differs
        s.open("tcsealed:v1:" + token[len(SEALED_PREFIX) :], record_id="r")
    aead = AESGCM(SecretKey(KEY).subkey("seal"))
    nonce = b"\x00" * 12
    unmarked = aead.encrypt(nonce, b"Jane Doe" + b"\x00" * 248, json.dumps([SEALED_PREFIX, "r", "text"]).encode())
    with pytest.raises(SealError):
        s.open(SEALED_PREFIX + base64.urlsafe_b64encode(nonce + unmarked).decode(), record_id="r")


# Sealed by the code before padding (commit 5eb4df6) under this fixed key, context "tenant-a".
OLD_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
OLD_TEXT = (
    "tcsealed:v1:nYljyDcdJ93tA9ufZl4YjuBzzTA4FDvFAe_3aY0rHhElVaVZ8LepHX9rQefgUg3yGVm18XHV5x-Ubwrn_2dKpYtBPuP2dwBK"
    "-JsBVNc0Fw=="
)
OLD_JSON = "tcsealed:v1:Vyq3DwTZGzC7esKetYmNXRcLeNfoWjdqa46Wd803S6Dmn0h4WAASg7nspKTe34U0-wNmqmyx6Jp12HVJ00cL39UTAw=="
OLD_RECORD_TEXT = "tcsealed:v1:FjPOi3_L0eNxySPwb4xsKX5CNtJD_cNbfg4DDr135pxWNXqRWvhb3ZhZoYH3MakZvibR"
OLD_RECORD_AUTHOR = "tcsealed:v1:4YJQVNn42SNv584hX_N_9XhFe7GYx5OWzs4flY0447bqU4CTiA=="


def test_tokens_sealed_before_padding_still_open() -> None:
    s = Sealer(OLD_KEY, context="tenant-a")
    assert Sealer.is_sealed(OLD_TEXT) and not OLD_TEXT.startswith(SEALED_PREFIX)
    assert s.open(OLD_TEXT, record_id="doc-1") == "Jane Doe, card 4111 1111 1111 1111, moved to Leeds."
    assert s.open_json(OLD_JSON, record_id="doc-1", field="metadata.x") == {"salary": 85000, "hiv_positive": True}
    records = RecordSealer(OLD_KEY, sealed_metadata=("author",), context="tenant-a")
    meta = {"author": OLD_RECORD_AUTHOR, "topic": "support", "_tc_id": "d2"}
    opened = records.open(OLD_RECORD_TEXT, meta, store_id="d2")
    assert opened.text == "Ann Lee called support." and opened.metadata == {"author": "Ann Lee", "topic": "support"}
    with pytest.raises(SealError):  # still bound to its record
        s.open(OLD_TEXT, record_id="doc-2")
