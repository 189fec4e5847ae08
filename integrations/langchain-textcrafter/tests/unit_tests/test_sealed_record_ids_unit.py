"""Issue 29.2: the store holds keyed record ids; the user's ids go in and come out, and old stores still work."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.core import SkippedRecordsWarning
from textcrafter_rag.sealed.layout import is_library_record
from textcrafter_rag.sealed.records import IDS_KEY, USER_ID_FIELD
from textcrafter_rag.sealing import Sealer, SealError, generate_key
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(12)]
IDS = [f"patient-{1230 + i}" for i in range(12)]  # meaningful ids: what links a stored record to a known text
#: A fixed key where a test looks for the ids' digits in what the store holds: under a random key, a keyed store id
#: (hex) now and then held "1230" by chance, and the test failed (seen once in CI).
FIXED_KEY = bytes(range(32))
MODES: dict[str, Any] = {
    "single": {"fetch_k": None},
    "candidates": {"fetch_k": TwoStageSearch(fetch_k=13)},
    "index": {"search": AppIndexSearch(open_k=13)},
}


class LookupRecordingStore(RecordingStore):
    """Records every id the sealed store asks the wrapped store for (reads and deletes)."""

    def __init__(self, embedding: Any) -> None:
        super().__init__(embedding)
        self.asked: list[Any] = []

    def get_by_ids(self, ids):  # type: ignore[no-untyped-def]
        self.asked.extend(ids)
        return super().get_by_ids(ids)

    def delete(self, ids=None, **kwargs):  # type: ignore[no-untyped-def]
        self.asked.extend(ids or [])
        return super().delete(ids, **kwargs)


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=32))


def _store(base: Any, mode: str, *, key: str | bytes | None = None, **kwargs: Any) -> SealedVectorStore:
    options = {**MODES[mode], **kwargs}
    return SealedVectorStore(LookupRecordingStore, embedding=base, key=key or generate_key(), **options)


def _held(store: SealedVectorStore) -> str:
    """Everything the wrapped store holds (ids, texts, metadata), as one string."""
    return json.dumps({str(k): {**v, "vector": None} for k, v in store.store.store.items()}, default=str)


def _strings(value: Any) -> list[str]:
    """Every string a held record has: keys and values, nested."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("mode", list(MODES))
def test_the_store_holds_no_user_id_and_every_read_returns_them(base, mode: str) -> None:
    store = _store(base, mode, key=FIXED_KEY, sealed_metadata=("ward",))
    metas = [{"ward": i % 5, "topic": "care"} for i in range(12)]
    assert store.add_texts(TEXTS, metas, ids=IDS) == IDS  # the caller's ids back, as before
    held = _held(store)
    # not as an id, a _tc_id, nor anywhere in a record, outside the ciphertexts (whose base64 may hold any four
    # characters, "1230" too, by chance); the keyed ids are the same every run (FIXED_KEY)
    plain = [v for v in _strings(store.store.store) if not Sealer.is_sealed(v)]
    assert "patient-" not in held and not [v for v in plain if "1230" in v]
    assert set(store.store_ids(IDS)) <= set(store.store.store)
    assert all(
        Sealer.is_sealed(r["metadata"][USER_ID_FIELD])
        for r in store.store.store.values()
        if "_tc_marker" not in r["metadata"]
    )
    hits = store.similarity_search_by_vector(base.doc(TEXTS[3]), k=2)
    assert hits[0].id == IDS[3] and hits[0].page_content == TEXTS[3] and hits[0].metadata == metas[3]
    assert {d.id for d in store.get_by_ids([IDS[1], IDS[2], "patient-none"])} == {IDS[1], IDS[2]}
    store.delete([IDS[1]])
    assert store.get_by_ids([IDS[1]]) == [] and IDS[1] not in [
        d.id for d in store.similarity_search_by_vector(base.doc(TEXTS[1]), k=3)
    ]
    store.add_documents([Document(id=IDS[1], page_content=TEXTS[1])])  # Document.id is the record id too
    assert [d.id for d in store.get_by_ids([IDS[1]])] == [IDS[1]] and "patient-" not in _held(store)


@pytest.mark.parametrize("mode", ["candidates", "index"])
def test_copy_to_another_tenant_gives_other_keyed_ids_and_keeps_the_users(base, mode: str) -> None:
    key = generate_key()
    source = _store(base, mode, key=key)
    source.add_texts(TEXTS, ids=IDS)
    target = _store(base, mode, key=key, context="tenant-b")
    assert source.copy_to(target, IDS[:4], delete_source=True) == IDS[:4]
    assert not set(source.store_ids(IDS)) & set(target.store_ids(IDS))  # two tenants, one key: unrelated ids
    assert "patient-" not in _held(target)
    assert [d.id for d in target.similarity_search_by_vector(base.doc(TEXTS[2]), k=1)] == [IDS[2]]
    assert source.get_by_ids(IDS[:4]) == [] and len(source.get_by_ids(IDS[4:])) == 8


def _old_release_store(base: Any, mode: str, key: str, options: dict[str, Any]) -> SealedVectorStore:
    """A store as the previous release wrote it: clear ids, values bound to them, a marker naming no id scheme."""
    old = SealedVectorStore(LookupRecordingStore, embedding=base, key=key, record_ids="clear", **options)
    old.add_texts(TEXTS, [{"ward": i % 5} for i in range(12)], ids=IDS)
    rows = old.store.store
    assert set(IDS) <= set(rows) and not any(USER_ID_FIELD in r["metadata"] for r in rows.values())
    for row in rows.values():
        row["metadata"].pop(IDS_KEY, None)  # the marker of a store written before ids were keyed
    return old


@pytest.mark.parametrize("mode", list(MODES))
def test_a_store_written_with_clear_ids_still_searches_reads_deletes_and_grows_keyed(base, mode: str, tmp_path) -> None:
    key = generate_key()
    options = (
        {"search": AppIndexSearch(open_k=13, index_path=tmp_path / "old.tcidx")} if mode == "index" else MODES[mode]
    )
    old = _old_release_store(base, mode, key, options)  # its index file (index mode) holds the clear ids
    keyed_only = SealedVectorStore(old.store, key=key, **options)
    old.store.asked.clear()
    assert keyed_only.get_by_ids([IDS[6]]) == []  # by default no clear id is looked up ...
    assert not [i for i in old.store.asked if str(i).startswith("patient-")]  # ... nor sent
    store = SealedVectorStore(old.store, key=key, legacy_clear_ids=True, **options)  # the caller says: clear ids
    assert store.record_ids == "keyed"
    assert store.similarity_search_by_vector(base.doc(TEXTS[5]), k=1)[0].id == IDS[5]
    assert [d.page_content for d in store.get_by_ids([IDS[6]])] == [TEXTS[6]]
    store.delete([IDS[6]])
    assert IDS[6] not in old.store.store and store.get_by_ids([IDS[6]]) == []
    store.add_texts(["Patient new was admitted."], ids=["patient-new"])  # new records are keyed
    assert "patient-new" not in _held(store)
    assert {d.id for d in store.get_by_ids([IDS[7], "patient-new"])} == {IDS[7], "patient-new"}


def test_a_keyed_store_never_sends_a_clear_id_and_a_clear_writer_is_refused(base) -> None:
    key = generate_key()
    store = _store(base, "candidates", key=key)
    store.add_texts(TEXTS, ids=IDS)
    fresh = SealedVectorStore(store.store, key=key, fetch_k=13)  # another process: reads the marker
    fresh.store.asked.clear()
    assert fresh.get_by_ids(["patient-9999"]) == []
    fresh.delete([IDS[0]])
    assert not [i for i in fresh.store.asked if str(i).startswith("patient-")]  # the marker says keyed only
    clear = SealedVectorStore(store.store, key=key, fetch_k=13, record_ids="clear")
    assert clear.get_by_ids([IDS[2]])[0].id == IDS[2]  # a clear-id reader finds keyed records
    with pytest.raises(ValueError, match="keyed record ids"):
        clear.add_texts(["x"], ids=["patient-x"])
    with pytest.raises(ValueError, match="record_ids"):
        _store(base, "single", record_ids="hashed")


def test_clear_ids_are_the_explicit_opt_out(base) -> None:
    store = _store(base, "single", record_ids="clear")
    store.add_texts(TEXTS[:2], ids=IDS[:2])
    data = {i for i, row in store.store.store.items() if not is_library_record(row["metadata"])}  # not the marker
    assert data == set(IDS[:2]) and store.store_ids(IDS[:2]) == IDS[:2]
    assert store.record_ids == "clear" and store.similarity_search_by_vector(base.doc(TEXTS[0]), k=1)[0].id == IDS[0]


def test_async_paths_map_ids(base) -> None:
    store = _store(base, "candidates")

    async def run() -> None:
        assert await store.aadd_texts(TEXTS, ids=IDS) == IDS
        assert [d.id for d in await store.aget_by_ids([IDS[4]])] == [IDS[4]]
        await store.adelete([IDS[4]])
        assert await store.aget_by_ids([IDS[4]]) == []
        assert (await store.asimilarity_search_by_vector(base.doc(TEXTS[3]), k=1))[0].id == IDS[3]

    asyncio.run(run())
    assert "patient-" not in _held(store)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_record_stripped_of_its_sealed_user_id_is_refused_not_renamed(base, mode: str) -> None:
    """The host deleted ``_tc_uid``: the record opened as its keyed id, no error; now it does not open."""
    store = _store(base, mode)
    store.add_texts(TEXTS, ids=IDS)
    keyed = store.store_ids([IDS[3]])[0]
    del store.store.store[keyed]["metadata"][USER_ID_FIELD]
    with pytest.raises(SealError):
        store.get_by_ids([IDS[3]])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SkippedRecordsWarning)
            hits = store.similarity_search_by_vector(base.doc(TEXTS[3]), k=3)
    except SealError:
        hits = []  # single-stage: the hit that does not open is an error
    assert hits == [] or store.skipped == 1
    assert all(d.id in IDS and d.id != IDS[3] for d in hits)  # never a keyed id in place of the user's
    assert [d.id for d in store.get_by_ids([IDS[4]])] == [IDS[4]]


class NoReadByIdStore(LookupRecordingStore):
    """A store that cannot read by id (as langchain-milvus): deletes are all the sealed store can send it."""

    get_by_ids = VectorStore.get_by_ids


@pytest.mark.parametrize("mode", ["single", "candidates", "index"])
@pytest.mark.parametrize("host", ["honest", "marker deleted", "marker says clear"])
def test_no_clear_id_reaches_the_store_unless_the_caller_says_it_holds_clear_ids(base, mode: str, host: str) -> None:
    """A lookup that missed was retried under the user's clear id unless the plain marker said keyed only.

    Single-stage stores write no marker, and a host can delete the marker or set its plain ``_tc_ids`` to
    "clear", then answer "not found": every later lookup handed it the user's id.
    """
    key = generate_key()
    writer = _store(base, mode, key=key)
    writer.add_texts(TEXTS, ids=IDS)
    for sid, row in list(writer.store.store.items()):
        if host == "marker deleted" and "_tc_marker" in row["metadata"]:
            del writer.store.store[sid]
        elif host == "marker says clear" and IDS_KEY in row["metadata"]:
            row["metadata"][IDS_KEY] = "clear"
    options = {"search": AppIndexSearch(open_k=13)} if mode == "index" else MODES[mode]
    store = SealedVectorStore(writer.store, key=key, **options)
    writer.store.asked.clear()
    assert store.get_by_ids(["patient-9999"]) == []  # a miss
    store.delete([IDS[0]])
    assert store.get_by_ids([IDS[0]]) == []  # already deleted: a miss
    store.delete([IDS[0], "patient-9999"])
    asyncio.run(store.adelete([IDS[1]]))
    assert asyncio.run(store.aget_by_ids([IDS[1]])) == []
    assert writer.store.asked and not [i for i in writer.store.asked if str(i).startswith("patient-")]
    assert [d.id for d in store.get_by_ids([IDS[2]])] == [IDS[2]]  # keyed records are found as before


def test_a_store_that_cannot_read_by_id_is_sent_no_clear_id_on_delete(base) -> None:
    """Such a store (langchain-milvus) was given both schemes' ids on every delete, even written keyed only."""
    key = generate_key()
    store = SealedVectorStore(NoReadByIdStore, embedding=base, key=key, fetch_k=13)
    store.add_texts(TEXTS, ids=IDS)
    store.delete(IDS[:3])
    asyncio.run(store.adelete(IDS[3:5]))
    assert store.store.asked == store.store_ids(IDS[:3]) + store.store_ids(IDS[3:5])  # keyed ids only
    legacy = SealedVectorStore(store.store, key=key, fetch_k=13, legacy_clear_ids=True)  # the caller says so
    legacy.delete(IDS[5:6])
    assert store.store.asked[-2:] == [*store.store_ids(IDS[5:6]), IDS[5]]
