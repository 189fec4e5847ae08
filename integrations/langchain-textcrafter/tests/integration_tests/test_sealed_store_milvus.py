"""Sealed documents end to end on Milvus Lite (``langchain_milvus``; the engine serves gRPC from this process).

The same 30 records as ``test_sealed_vector_store.py`` go through ``ProtectedEmbeddings`` and
``SealedVectorStore`` into Milvus Lite (a ``*.db`` directory). Milvus returns a hit's id in the
``pk`` metadata field (``Document.id`` is empty); the wrapper opens each hit with it. Milvus writes
rows to uncompressed Arrow WAL files while open and SNAPPY Parquet segments when released, so the
data directory is scanned both while open and after release, and the Parquet files are also decoded
and their strings scanned: no text, 3-word fragment or sealed value may be found, while the same
scans over an unsealed store find every text. A two-stage store (``fetch_k=``) is checked too
(``_two_stage_engine_checks.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import scan_for_plaintext
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

from ._sealed_engine_servers import (
    RECORDS,
    SECRETS,
    check_each_text_finds_itself,
    check_paraphrases_find_their_record,
    check_plain_filter_and_sealed_refusal,
    check_scores_retriever_and_mmr,
    clean_query_vectors,
    documents,
    listening_ports,
    milvus_port,
    parquet_strings,
    release_milvus,
)
from ._two_stage_engine_checks import (
    StoredRow,
    add_two_stage_records,
    check_two_stage_hits,
    check_two_stage_rows,
    two_stage_store,
)

pytest.importorskip("milvus_lite", reason="the Milvus tests need milvus-lite (the test extra)")
pytest.importorskip("pyarrow", reason="the Milvus tests decode Parquet with pyarrow")
Milvus = pytest.importorskip("langchain_milvus", reason="the Milvus tests need langchain-milvus").Milvus

COLLECTION = "sealed_docs"


def _milvus(uri: str, embeddings: Any, collection: str = COLLECTION) -> Any:
    """Exact (FLAT, L2) search, reads see all writes, the wrapper's ids as primary keys, any metadata field."""
    return Milvus(
        embedding_function=embeddings,
        collection_name=collection,
        connection_args={"uri": uri},
        index_params={"index_type": "FLAT", "metric_type": "L2"},
        consistency_level="Strong",
        auto_id=False,
        enable_dynamic_field=True,
    )


def _sealed(uri: str, embeddings: Any, key: str, collection: str = COLLECTION) -> SealedVectorStore:
    """A sealed store that builds its Milvus store (``collection`` in ``uri``) with the embeddings it is given."""
    return SealedVectorStore(
        lambda e: _milvus(uri, e, collection),
        embedding=embeddings,
        key=key,
        sealed_metadata=SEALED_FIELDS,
        fetch_k=None,
    )


def _release(uri: str, port: int | None) -> None:
    """Stop the in-process server for ``uri`` and check it no longer listens."""
    release_milvus(uri)
    assert milvus_port(uri) is None and port is not None and port not in listening_ports()


def _close_sync(store: Any) -> None:
    store.client.close()
    if store._async_milvus_client is not None:  # made in __init__, bound to no running loop here
        with contextlib.suppress(RuntimeError):
            asyncio.run(store._async_milvus_client.close())


@dataclass
class Running:
    store: SealedVectorStore
    ids: list[str]
    key: str


@pytest.fixture(scope="module")
def embeddings() -> ProtectedEmbeddings:
    return ProtectedEmbeddings()  # bundled MiniLM, the shipped policy (eps 1.0)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, embeddings: Any) -> Iterator[Running]:
    """One Milvus Lite database for the read-only tests: the 30 records added through the sealed wrapper."""
    uri = str(tmp_path_factory.mktemp("milvus-read") / "milvus.db")
    key = generate_key()
    store = _sealed(uri, embeddings, key)
    port = milvus_port(uri)
    try:
        yield Running(store, store.add_documents(documents()), key)
    finally:
        _close_sync(store.store)
        _release(uri, port)


@pytest.fixture(scope="module")
def query_vectors(minilm: Any) -> dict[str, Any]:
    return clean_query_vectors(minilm)


def test_each_text_retrieves_its_own_decrypted_document(running: Running, query_vectors: dict[str, Any]) -> None:
    hits = check_each_text_finds_itself(running.store, running.ids, query_vectors["text"])
    assert all(h.metadata["pk"] == h.id for hit_list in hits for h in hit_list)  # opened with Milvus's own id field


def test_paraphrased_questions_find_their_document(running: Running, query_vectors: dict[str, Any]) -> None:
    check_paraphrases_find_their_record(running.store, running.ids, query_vectors["question"])


@pytest.mark.filterwarnings("ignore:Relevance scores must be between")  # L2 relevance on non-unit vectors
def test_scores_retriever_and_mmr(running: Running) -> None:
    check_scores_retriever_and_mmr(running.store, running.ids)
    # langchain-milvus has no get_by_ids; the sealed store gives its Milvus store one (a query by primary key)
    (doc,) = running.store.get_by_ids([running.ids[0]])
    assert doc.id == running.ids[0] and doc.page_content == RECORDS[0].text


def test_plain_fields_filter_and_sealed_fields_are_refused(running: Running) -> None:
    check_plain_filter_and_sealed_refusal(running.store, running.ids, expr='category == "moves"')


def test_a_wrong_key_or_context_or_a_moved_record_raises(tmp_path: Path, embeddings: Any) -> None:
    uri, key = str(tmp_path / "milvus.db"), generate_key()
    store = _sealed(uri, embeddings, key)
    inner = store.store
    port = milvus_port(uri)
    try:
        ids = store.add_documents(documents(RECORDS[:3]))
        assert store.similarity_search(RECORDS[0].text, k=1)[0].page_content == RECORDS[0].text
        for other in (
            SealedVectorStore(inner, key=generate_key(), sealed_metadata=SEALED_FIELDS, fetch_k=None),
            SealedVectorStore(inner, key=key, sealed_metadata=SEALED_FIELDS, context="tenant-b", fetch_k=None),
        ):
            with pytest.raises(SealError):
                other.similarity_search(RECORDS[0].text, k=1)
        pk0, pk1 = store.store_ids(ids[:2])  # Milvus holds keyed ids
        row = inner.client.query(COLLECTION, filter=f'pk == "{pk0}"', output_fields=["*"])[0]
        inner.client.upsert(COLLECTION, [{**row, "pk": pk1}])  # record 0's values onto record 1's key
        with pytest.raises(SealError, match="moved"):
            store.similarity_search(RECORDS[0].text, k=3)
    finally:
        _close_sync(inner)
        _release(uri, port)


def test_two_stage_search_ranks_by_exact_cosine_and_the_engine_holds_no_clean_vector(
    tmp_path: Path, embeddings: Any, minilm: Any
) -> None:
    uri = str(tmp_path / "milvus.db")
    store = two_stage_store(lambda e: _milvus(uri, e), embeddings, generate_key())
    port = milvus_port(uri)
    try:
        ids = add_two_stage_records(store)
        check_two_stage_hits(store, ids, minilm)
        raw = store.store.client.query(COLLECTION, filter='pk != ""', output_fields=["*"])  # what Milvus holds
    finally:
        _close_sync(store.store)
        _release(uri, port)
    rows = [StoredRow(r["text"], {k: v for k, v in r.items() if k not in ("text", "vector")}, r["vector"]) for r in raw]
    check_two_stage_rows(rows, minilm, tmp_path)


async def test_delete_and_async_then_no_plaintext_on_disk(tmp_path: Path, embeddings: Any) -> None:
    """Writes, a delete and async calls, then the raw files (open and released) and decoded Parquet are scanned."""
    uri, key = str(tmp_path / "milvus.db"), generate_key()
    store = _sealed(uri, embeddings, key)  # built in this test's loop: its async client binds to it
    astore = _sealed(uri, embeddings, key, "sealed_async")
    inner, ainner = store.store, astore.store
    port = milvus_port(uri)
    try:
        ids = store.add_documents(documents())
        assert store.delete([ids[1]]) is True
        assert RECORDS[1].text not in [h.page_content for h in store.similarity_search(RECORDS[1].text, k=29)]
        pk0 = store.store_ids(ids[:1])[0]  # Milvus holds keyed ids
        token = inner.client.query(COLLECTION, filter=f'pk == "{pk0}"', output_fields=["text"])[0]["text"]

        docs = documents(RECORDS[:6])
        docs[0].id = "00000000-0000-4000-8000-000000000001"  # a Document.id is the record id
        aids = await astore.aadd_documents(docs)
        assert aids[0] == docs[0].id and len(set(aids)) == 6
        hits = await astore.asimilarity_search(RECORDS[0].text, k=2)
        assert (hits[0].id, hits[0].page_content) == (docs[0].id, RECORDS[0].text)
        assert hits[0].metadata["email"] == RECORDS[0].metadata["email"]
        scored = await astore.asimilarity_search_with_score(RECORDS[2].text, k=1)
        assert scored[0][0].page_content == RECORDS[2].text
        assert (await astore.as_retriever(search_kwargs={"k": 1}).ainvoke(RECORDS[3].text))[0].id == aids[3]
        assert await astore.adelete([aids[3]]) is True
        after = [h.id for h in await astore.asimilarity_search(RECORDS[3].text, k=6)]
        assert len(after) == 5 and aids[3] not in after

        assert any(token.encode() in f.read_bytes() for f in Path(uri).rglob("*.arrow"))  # rows are in the WAL
        open_hits = scan_for_plaintext([uri], SECRETS)
        assert open_hits == [], "\n".join(map(str, open_hits[:10]))
    finally:
        for s in (inner, ainner):
            s.client.close()
            await s.aclient.close()
        _release(uri, port)

    decoded = parquet_strings(Path(uri))
    assert token in decoded  # the released segments hold the (sealed) rows
    (tmp_path / "decoded.txt").write_text("\n".join(decoded), encoding="utf-8")
    hits = scan_for_plaintext([uri, tmp_path / "decoded.txt"], SECRETS)
    assert hits == [], "\n".join(map(str, hits[:10]))


def test_the_scan_finds_every_text_in_an_unsealed_store(tmp_path: Path, embeddings: Any) -> None:
    """Negative control: the same documents unsealed: found in the open WAL and in the decoded segments."""
    uri = str(tmp_path / "milvus.db")
    inner = _milvus(uri, embeddings)
    port = milvus_port(uri)
    try:
        inner.add_documents(documents(), ids=[f"doc-{i}" for i in range(len(RECORDS))])
        open_hits = scan_for_plaintext([uri], SECRETS)
    finally:
        _close_sync(inner)
        _release(uri, port)
    (tmp_path / "decoded.txt").write_text("\n".join(parquet_strings(Path(uri))), encoding="utf-8")
    for hits in (open_hits, scan_for_plaintext([tmp_path / "decoded.txt"], SECRETS)):
        assert {h.text_index for h in hits if h.kind == "text"} == set(range(len(SECRETS)))
        assert len({(h.text_index, h.needle) for h in hits if h.kind == "fragment"}) > 20 * len(RECORDS)
