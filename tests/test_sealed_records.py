"""RecordSealer: what a sealed record holds, how ids bind it, and that nothing opens where it should not."""

from __future__ import annotations

import uuid

import pytest

from textcrafter_rag.errors import TextcrafterError
from textcrafter_rag.sealed.records import (
    ID_FIELD,
    USER_ID_FIELD,
    RecordSealer,
    canonical_record_id,
    filter_field_names,
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
    assert Sealer.is_sealed(sealed.text) and "Jane Doe" not in sealed.text  # 8 characters: never there by chance
    assert Sealer.is_sealed(sealed.metadata["author"]) and Sealer.is_sealed(sealed.metadata["dob"])
    assert sealed.metadata["category"] == "moves" and sealed.metadata["pages"] == 3  # plain: filterable
    assert sealed.metadata[ID_FIELD] == sealed.store_id == records.keyed_id("doc-1") != "doc-1"  # a keyed id
    assert "doc-1" not in repr(sealed) and Sealer.is_sealed(sealed.metadata[USER_ID_FIELD])
    assert "Jane" not in repr(sealed.metadata) and "1980" not in repr(sealed.metadata)
    opened = records.open(sealed.text, sealed.metadata, store_id=sealed.store_id)
    assert (opened.record_id, opened.text, opened.metadata) == ("doc-1", TEXT, META)  # _tc_id, _tc_uid removed
    assert META == {"author": "Jane Doe", "dob": "1980-02-03", "category": "moves", "pages": 3}  # input untouched


def test_missing_fields_and_store_added_fields(records: RecordSealer) -> None:
    sealed = records.seal(TEXT, None, record_id=7)
    assert set(sealed.metadata) == {ID_FIELD, USER_ID_FIELD} and sealed.metadata[ID_FIELD] == records.keyed_id("7")
    opened = records.open(sealed.text, {**sealed.metadata, "_collection_name": "c"}, store_id=None)
    assert opened.metadata == {"_collection_name": "c"} and opened.record_id == "7"


def test_ids_are_bound_in_canonical_form(records: RecordSealer) -> None:
    u = uuid.uuid4()
    clear = RecordSealer(generate_key(), record_ids="clear")
    sealed = clear.seal(TEXT, {}, record_id=u.hex)  # given without dashes, echoed with them (Qdrant)
    assert clear.open(sealed.text, sealed.metadata, store_id=str(u)).text == TEXT
    assert clear.open(sealed.text, sealed.metadata, store_id=u).text == TEXT
    sealed = clear.seal(TEXT, {}, record_id=0)  # an int id comes back as a string
    assert clear.open(sealed.text, sealed.metadata, store_id="0").text == TEXT
    keyed = records.seal(TEXT, {}, record_id=u.hex)  # a keyed id is a UUID: echoed in its own spelling
    assert records.open(keyed.text, keyed.metadata, store_id=uuid.UUID(keyed.store_id).hex).record_id == str(u)
    assert records.keyed_id(0) == records.keyed_id("0") and records.keyed_id(u.hex) == records.keyed_id(u)
    assert canonical_record_id(u.hex.upper()) == str(u) and canonical_record_id("doc 1") == "doc 1"
    assert uuid.UUID(new_record_id()).version == 4 and new_record_id() != new_record_id()


@pytest.mark.parametrize("change", ["record", "key", "context", "edit_text", "edit_field", "swap_field", "plain"])
def test_anything_else_raises_seal_error(key: str, records: RecordSealer, change: str) -> None:
    sealed = records.seal(TEXT, META, record_id="doc-1")
    other = records.seal("Someone else entirely.", {"author": "Bob"}, record_id="doc-2")
    opener, text, meta, store_id = records, sealed.text, dict(sealed.metadata), sealed.store_id
    if change == "record":  # the whole record copied to another id, _tc_id included
        store_id = other.store_id
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
        records.open(TEXT, sealed.metadata, store_id=sealed.store_id)
    with pytest.raises(SealError):
        records.open(None, sealed.metadata, store_id=sealed.store_id)


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


@pytest.mark.parametrize(
    "change",
    ["delete_author", "delete_both", "add_sealed_field", "opened_with_fewer_fields", "opened_with_more_fields_present"],
)
def test_the_set_of_sealed_fields_is_bound(key: str, records: RecordSealer, change: str) -> None:
    """Issue 24.4: a record whose sealed field was deleted (a Qdrant payload overwritten) no longer opens without it."""
    sealed = records.seal(TEXT, META, record_id="doc-1")
    meta, opener = dict(sealed.metadata), records
    if change == "delete_author":
        del meta["author"]
    elif change == "delete_both":
        del meta["author"], meta["dob"]
    elif change == "add_sealed_field":  # a record sealed without "dob" given one
        sealed = records.seal(TEXT, {"author": "Jane Doe"}, record_id="doc-1")
        meta = {**sealed.metadata, "dob": records.seal(TEXT, META, record_id="doc-1").metadata["dob"]}
    elif change == "opened_with_fewer_fields":
        opener = RecordSealer(key, sealed_metadata=("author",))
    elif change == "opened_with_more_fields_present":
        opener = RecordSealer(key, sealed_metadata=("author", "dob", "category"))
    with pytest.raises(SealError, match="sealed metadata field was removed or added") as info:
        opener.open(sealed.text, meta, store_id=sealed.store_id)
    assert key not in str(info.value) and "Jane" not in str(info.value)


def test_reserved_and_plain_keys_are_not_part_of_the_bound_set(key: str, records: RecordSealer) -> None:
    """Keys outside sealed_metadata (store-added fields, another layer's ``_tc_*`` values) may come and go."""
    sealed = records.seal(TEXT, META, record_id="doc-1")
    sid = sealed.store_id
    vec = records.seal_value([0.1, 0.2], record_id=sid, field="vector")
    meta = {k: v for k, v in sealed.metadata.items() if k != "category"} | {"_tc_vec": vec, "_id": sid}
    opened = records.open(sealed.text, meta, store_id=sid)
    assert opened.text == TEXT and opened.metadata["author"] == "Jane Doe" and "category" not in opened.metadata
    assert records.open_value(opened.metadata["_tc_vec"], record_id=sid, field="vector") == [0.1, 0.2]
    # a field listed in sealed_metadata but absent from both sealing and opening changes nothing
    wider = RecordSealer(key, sealed_metadata=("author", "dob", "email"))
    assert wider.open(sealed.text, sealed.metadata, store_id=sid).text == TEXT


def test_filters_on_sealed_fields_are_refused_whatever_their_form(records: RecordSealer) -> None:
    """Issue 24.8: a Qdrant models.Filter on a sealed field matched nothing, silently."""
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
    from qdrant_client import models

    def field(key: str) -> models.FieldCondition:
        return models.FieldCondition(key=key, match=models.MatchValue(value="x"))

    sealed_filters = [
        {"author": "Jane"},
        {"$and": [{"category": "moves"}, {"$or": [{"dob": {"$eq": "1980"}}]}]},
        {"bool": {"must": [{"term": {"metadata.author": "Jane"}}]}},  # Elasticsearch-style nesting
        {"must": [{"key": "metadata.dob", "match": {"value": "1980"}}]},  # a dict-shaped Qdrant filter
        models.Filter(must=[field("metadata.author")]),  # langchain_qdrant's payload layout
        models.Filter(must=[field("category")], should=[models.Filter(must_not=[field("dob")])]),
        models.Filter(min_should=models.MinShould(conditions=[field("author")], min_count=1)),
        models.Filter(must=[models.IsEmptyCondition(is_empty=models.PayloadField(key="author"))]),
        models.Filter(must=[models.NestedCondition(nested=models.Nested(key="author", filter=models.Filter()))]),
        models.Filter(must=[field("author.city")]),  # a path under a sealed field
        MetadataFilters(
            filters=[
                MetadataFilter(key="category", value="m"),
                MetadataFilters(filters=[MetadataFilter(key="dob", value="1980")]),
            ]
        ),
        "category == 'moves' and author == \"x\"",  # a Milvus-style expression
    ]
    for flt in sealed_filters:
        with pytest.raises(ValueError, match="cannot filter on sealed") as info:
            records.check_filter(flt)
        assert isinstance(info.value, TextcrafterError)
    plain_filters = [
        None,
        {"category": "moves", "pages": {"$gt": 2}},
        {"category": "author"},  # a value equal to a sealed field's name is not a field
        models.Filter(must=[field("metadata.category"), field("pages")]),
        MetadataFilters(filters=[MetadataFilter(key="category", value="author")]),
        "category == 'author'",
        models.Filter(must=[field("authorship")]),  # another field sharing a prefix
    ]
    for flt in plain_filters:
        records.check_filter(flt)
    assert filter_field_names(models.Filter(must=[field("a")], should=[field("b")], must_not=[field("c")])) == {
        "a",
        "b",
        "c",
    }


def test_a_record_s_sealed_parts_are_bound_to_each_other_and_older_records_still_open():
    from textcrafter_rag.sealed.records import RecordSealer
    from textcrafter_rag.sealing import SealError, generate_key

    sealer = RecordSealer(generate_key(), sealed_metadata=("author", "diagnosis"))
    v1 = sealer.seal("first version", {"author": "Jane Doe", "diagnosis": "flu"}, record_id="r1")
    v2 = sealer.seal("second version", {"author": "Bob Smith", "diagnosis": "flu"}, record_id="r1")
    assert sealer.open(v2.text, v2.metadata).metadata["author"] == "Bob Smith"
    spliced = {**v2.metadata, "author": v1.metadata["author"]}  # the new text beside an old sealed author
    with pytest.raises(SealError):
        sealer.open(v2.text, spliced)
    with pytest.raises(SealError):
        sealer.open(v1.text, v2.metadata)  # the old text beside the new values
    assert sealer.open(v1.text, v1.metadata).text == "first version"  # a whole old version: see SECURITY.md
    meta = dict(v1.metadata)
    legacy_text = sealer.sealer.seal("legacy", record_id=v1.store_id, field=sealer._text_field(meta, bound=False))
    assert sealer.open(legacy_text, meta).text == "legacy"  # sealed before the binding: still opens


def test_record_ids_are_keyed_per_key_and_tenant_and_name_nothing(key: str) -> None:
    """Issue 29.2: the store holds a keyed UUID per record; the user's id only sealed inside it."""
    a, b = RecordSealer(key), RecordSealer(key, context="tenant-b")
    sealed = a.seal(TEXT, {"ward": "3"}, record_id="patient-1234")
    sid = sealed.store_id
    assert uuid.UUID(sid).version == 4 and str(uuid.UUID(sid)) == sid
    assert "patient" not in repr(sealed) and "1234" not in repr(sealed)
    assert sid == a.keyed_id("patient-1234") != b.keyed_id("patient-1234")  # two tenants, one key
    assert sid != RecordSealer(generate_key()).keyed_id("patient-1234") and sid != a.keyed_id("patient-1235")
    assert a.open(sealed.text, sealed.metadata, store_id=sid).record_id == "patient-1234"
    with pytest.raises(SealError):  # another tenant under the key cannot open it
        b.open(sealed.text, sealed.metadata, store_id=sid)
    with pytest.raises(ValueError, match="record_ids"):
        RecordSealer(key, record_ids="hashed")
    with pytest.raises(ValueError, match="reserved"):
        a.seal(TEXT, {USER_ID_FIELD: "x"}, record_id="r")


def test_a_sealed_user_id_moved_to_another_record_does_not_open(key: str) -> None:
    records = RecordSealer(key)
    one, two = (records.seal(TEXT, {}, record_id=r) for r in ("patient-1", "patient-2"))
    moved = {**one.metadata, USER_ID_FIELD: two.metadata[USER_ID_FIELD]}
    with pytest.raises(SealError):
        records.open(one.text, moved, store_id=one.store_id)
    # a token bound to this record's id but naming another user id (only the key holder can make one)
    forged = {
        **one.metadata,
        USER_ID_FIELD: records.seal_value("patient-2", record_id=one.store_id, field=USER_ID_FIELD),
    }
    with pytest.raises(SealError, match="another record"):
        records.open(one.text, forged, store_id=one.store_id)


def test_clear_ids_are_the_previous_format_and_both_schemes_read_each_other(key: str) -> None:
    clear, keyed = RecordSealer(key, record_ids="clear"), RecordSealer(key)
    old = clear.seal(TEXT, {}, record_id="doc-1")  # what the previous release wrote: the id in clear
    assert old.store_id == "doc-1" and old.metadata == {ID_FIELD: "doc-1"}
    assert keyed.open(old.text, old.metadata, store_id="doc-1").record_id == "doc-1"  # an old store still opens
    new = keyed.seal(TEXT, {}, record_id="doc-1")
    assert clear.open(new.text, new.metadata, store_id=new.store_id).record_id == "doc-1"
    assert keyed.other_store_id("doc-1") == "doc-1" and clear.other_store_id("doc-1") == new.store_id
    assert keyed.record_ids == "keyed" and clear.record_ids == "clear"


@pytest.mark.parametrize("scheme", ["keyed", "sealed"])
@pytest.mark.parametrize("metadata", [{}, {"author": "Jane Doe", "ward": "3"}], ids=["no-sealed-field", "sealed-field"])
def test_a_record_stripped_of_its_sealed_user_id_does_not_open(key: str, scheme: str, metadata: dict) -> None:
    """Deleting ``_tc_uid`` made a record open under its keyed id, no error: its presence is bound to the text now."""
    records = RecordSealer(key, sealed_metadata=("author",), record_ids=scheme)
    sealed = records.seal(TEXT, metadata, record_id="patient-1234")
    sid = sealed.store_id
    assert records.open(sealed.text, sealed.metadata, store_id=sid).record_id == "patient-1234"
    stripped = {k: v for k, v in sealed.metadata.items() if k != USER_ID_FIELD}
    with pytest.raises(SealError):
        records.open(sealed.text, stripped, store_id=sid)
    with pytest.raises(SealError):  # a clear-id reader is no way around it
        RecordSealer(key, sealed_metadata=("author",), record_ids="clear").open(sealed.text, stripped, store_id=sid)
    # a record written before the binding (its text binds no user id) still opens with its sealed user id ...
    meta = {k: v for k, v in sealed.metadata.items() if k != ID_FIELD}
    older = records.sealer.seal(TEXT, record_id=sid, field=records._text_field(meta))
    assert records.open(older, sealed.metadata, store_id=sid).record_id == "patient-1234"
    if scheme == "sealed":  # ... and a sealed id names its user id: stripped, an old record is refused too
        with pytest.raises(SealError, match="no sealed user id"):
            records.open(older, stripped, store_id=sid)
    else:  # ... and stripped, an old keyed record opens under its keyed id: the residual in SECURITY.md
        assert records.open(older, stripped, store_id=sid).record_id == sid
    clear = RecordSealer(key, sealed_metadata=("author",), record_ids="clear").seal(TEXT, metadata, record_id="p-1")
    assert records.open(clear.text, clear.metadata, store_id="p-1").record_id == "p-1"  # clear ids open as before


def test_sealed_ids_turn_back_with_the_key_only(key: str) -> None:
    """For stores that answer with ids alone (LlamaIndex FAISS): deterministic, padded, reversible under the key."""
    records = RecordSealer(key, record_ids="sealed")
    sid = records.store_id("patient-1234")
    assert sid == records.store_id("patient-1234") and "patient" not in sid and "1234" not in sid
    assert len(records.store_id("p")) == len(records.store_id("patient-12345678"))  # padded to a size class
    assert records.ids.opened_id(sid) == "patient-1234" and records.ids.opened_id("patient-1234") is None
    assert RecordSealer(key, context="tenant-b").ids.opened_id(sid) is None  # another tenant cannot turn it back
    sealed = records.seal(TEXT, {}, record_id="patient-1234")
    assert (
        sealed.store_id == sid and records.open(sealed.text, sealed.metadata, store_id=sid).record_id == "patient-1234"
    )


def test_the_id_mapping_holds_key_material_and_never_serialises(key: str) -> None:
    import copy
    import pickle

    from textcrafter_rag.sealed.record_ids import RecordIds
    from textcrafter_rag.sealing import NotPicklableError, SecretKey

    ids = RecordSealer(key).ids
    assert isinstance(ids, RecordIds) and key not in repr(ids) and copy.deepcopy(ids) is ids
    with pytest.raises(NotPicklableError):
        pickle.dumps(ids)
    with pytest.raises(ValueError, match="record_ids"):
        RecordIds(SecretKey(key), scheme="hashed")


def test_canonical_ids_take_the_fast_path_and_every_spelling_still_reads_as_before() -> None:
    """An id already in canonical UUID form is returned as it is (no parse); every other spelling as uuid spells it."""
    u = uuid.uuid4()
    for spelling in (str(u), u.hex, u.hex.upper(), str(u).upper(), "{" + str(u) + "}", "urn:uuid:" + str(u), u):
        assert canonical_record_id(spelling) == str(u)
    for plain in ("doc 1", "0", str(u) + " ", str(u)[:-1] + "g", "r" + str(u)[1:]):
        assert canonical_record_id(plain) == plain
    assert canonical_record_id(0) == "0"
