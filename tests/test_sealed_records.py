"""RecordSealer: what a sealed record holds, how ids bind it, and that nothing opens where it should not."""

from __future__ import annotations

import uuid

import pytest

from textcrafter_rag.sealed_records import (
    ID_FIELD,
    RecordSealer,
    canonical_record_id,
    new_record_id,
)
from textcrafter_rag.sealing import Sealer, SealError, generate_key

TEXT = "Jane Doe, card 4111 1111 1111 1111, moved to Leeds."
META = {"author": "Jane Doe", "dob": "1980-02-03", "category": "moves", "pages": 3}


@pytest.fixture
def key() -> str:
    return generate_key()


@pytest.fixture
def records(key: str) -> RecordSealer:
    return RecordSealer(key, sealed_metadata=("author", "dob"))


def test_round_trip_seals_the_text_and_only_the_named_fields(records: RecordSealer) -> None:
    sealed = records.seal(TEXT, META, record_id="doc-1")
    assert Sealer.is_sealed(sealed.text) and "Jane" not in sealed.text
    assert Sealer.is_sealed(sealed.metadata["author"]) and Sealer.is_sealed(sealed.metadata["dob"])
    assert sealed.metadata["category"] == "moves" and sealed.metadata["pages"] == 3  # plain: filterable
    assert sealed.metadata[ID_FIELD] == "doc-1"
    assert "Jane" not in repr(sealed.metadata) and "1980" not in repr(sealed.metadata)
    opened = records.open(sealed.text, sealed.metadata, store_id="doc-1")
    assert (opened.record_id, opened.text, opened.metadata) == ("doc-1", TEXT, META)  # _tc_id removed
    assert META == {"author": "Jane Doe", "dob": "1980-02-03", "category": "moves", "pages": 3}  # input untouched


def test_missing_fields_and_store_added_fields(records: RecordSealer) -> None:
    sealed = records.seal(TEXT, None, record_id=7)
    assert sealed.metadata == {ID_FIELD: "7"}
    opened = records.open(sealed.text, {**sealed.metadata, "_collection_name": "c"}, store_id=None)
    assert opened.metadata == {"_collection_name": "c"} and opened.record_id == "7"


def test_ids_are_bound_in_canonical_form(records: RecordSealer) -> None:
    u = uuid.uuid4()
    sealed = records.seal(TEXT, {}, record_id=u.hex)  # given without dashes, echoed with them (Qdrant)
    assert records.open(sealed.text, sealed.metadata, store_id=str(u)).text == TEXT
    assert records.open(sealed.text, sealed.metadata, store_id=u).text == TEXT
    sealed = records.seal(TEXT, {}, record_id=0)  # an int id comes back as a string
    assert records.open(sealed.text, sealed.metadata, store_id="0").text == TEXT
    assert canonical_record_id(u.hex.upper()) == str(u) and canonical_record_id("doc 1") == "doc 1"
    assert uuid.UUID(new_record_id()).version == 4 and new_record_id() != new_record_id()


@pytest.mark.parametrize("change", ["record", "key", "context", "edit_text", "edit_field", "swap_field", "plain"])
def test_anything_else_raises_seal_error(key: str, records: RecordSealer, change: str) -> None:
    sealed = records.seal(TEXT, META, record_id="doc-1")
    other = records.seal("Someone else entirely.", {"author": "Bob"}, record_id="doc-2")
    opener, text, meta, store_id = records, sealed.text, dict(sealed.metadata), "doc-1"
    if change == "record":  # the whole record copied to another id, _tc_id included
        store_id = "doc-2"
    elif change == "key":
        opener = RecordSealer(generate_key(), sealed_metadata=("author", "dob"))
    elif change == "context":
        opener = RecordSealer(key, sealed_metadata=("author", "dob"), context="tenant-b")
    elif change == "edit_text":
        text = text[:-4] + ("AAAA" if not text.endswith("AAAA") else "BBBB")
    elif change == "edit_field":
        meta["author"] = other.metadata["author"]  # a sealed value moved in from another record
    elif change == "swap_field":
        meta["author"], meta["dob"] = meta["dob"], meta["author"]  # moved to another field
    elif change == "plain":
        meta["author"] = "Jane Doe"  # a sealed field stored in the clear
    with pytest.raises(SealError) as info:
        opener.open(text, meta, store_id=store_id)
    assert key not in str(info.value) and "Jane" not in str(info.value)


def test_a_hit_without_any_id_or_with_plain_text_fails(records: RecordSealer) -> None:
    sealed = records.seal(TEXT, {}, record_id="doc-1")
    with pytest.raises(SealError, match="no id"):
        records.open(sealed.text, {}, store_id=None)
    with pytest.raises(SealError, match="not a sealed value"):
        records.open(TEXT, sealed.metadata, store_id="doc-1")
    with pytest.raises(SealError):
        records.open(None, sealed.metadata, store_id="doc-1")


def test_values_seal_whole_objects(records: RecordSealer) -> None:
    token = records.seal_value({"text": TEXT, "n": [1, 2]}, record_id="n1", field="node")
    assert records.open_value(token, record_id="n1", field="node") == {"text": TEXT, "n": [1, 2]}
    for rid, field in (("n2", "node"), ("n1", "kv:docstore/data")):
        with pytest.raises(SealError):
            records.open_value(token, record_id=rid, field=field)


def test_refusals(key: str, records: RecordSealer) -> None:
    with pytest.raises(TypeError, match="not a string"):
        RecordSealer(key, sealed_metadata="author")
    with pytest.raises(ValueError, match="reserved"):
        RecordSealer(key, sealed_metadata=(ID_FIELD,))
    with pytest.raises(ValueError, match="reserved"):
        records.seal(TEXT, {ID_FIELD: "x"}, record_id="a")
    with pytest.raises(ValueError, match="already sealed"):
        records.seal(records.seal(TEXT, {}, record_id="a").text, {}, record_id="a")
    with pytest.raises(TypeError, match="must be a str"):
        records.seal(b"bytes", {}, record_id="a")  # type: ignore[arg-type]
    with pytest.raises(SealError, match="needs an id"):
        records.seal(TEXT, {}, record_id=None)
    with pytest.raises(ValueError, match="cannot filter on sealed"):
        records.check_filter_keys(["category", "author"])
    records.check_filter_keys(["category", "pages"])
    assert key not in repr(records) and "redacted" in repr(records)
    assert records.plain_metadata(META) == {"category": "moves", "pages": 3}
