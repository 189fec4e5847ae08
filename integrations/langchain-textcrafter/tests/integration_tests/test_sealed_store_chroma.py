"""Sealed documents end to end on a real Chroma server (``chroma run`` on loopback, ``langchain_chroma`` over HTTP).

The same 30 records as ``test_sealed_vector_store.py`` (Qdrant local mode is a Python
re-implementation, not an engine) go through ``ProtectedEmbeddings`` and ``SealedVectorStore`` into
a Chroma server that each test starts and stops itself. Retrieval must return the right decrypted
documents; after the server is stopped, every byte of its data directory (``chroma.sqlite3`` and
the HNSW segment files) is scanned for each text, each 3-word fragment and each sealed value:
nothing may be found, while the same scan over an unsealed store finds every text.

Chroma keeps deleted records in its ``embeddings_queue`` until a flush, so the test asserts that no
plaintext is ever written, not that a deleted record's bytes are gone. A two-stage store
(``fetch_k=``) is checked on the same server (``_two_stage_engine_checks.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings, FakeEmbeddings

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError
from textcrafter_rag.sealed.port import serves_concurrent_calls
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import scan_for_plaintext, scanned_files
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

from ._sealed_engine_servers import (
    RECORDS,
    SECRETS,
    ChromaServer,
    assert_opened,
    check_each_text_finds_itself,
    check_paraphrases_find_their_record,
    check_plain_filter_and_sealed_refusal,
    check_scores_retriever_and_mmr,
    clean_query_vectors,
    documents,
    no_chroma_default_embedding,
)
from ._two_stage_engine_checks import (
    StoredRow,
    add_two_stage_records,
    app_index_store,
    check_two_stage_hits,
    check_two_stage_rows,
    two_stage_store,
)

chromadb = pytest.importorskip("chromadb", reason="the Chroma tests need chromadb (the test extra)")
Chroma = pytest.importorskip("langchain_chroma", reason="the Chroma tests need langchain-chroma").Chroma
from chromadb.config import Settings

COLLECTION = "sealed-docs"  # Chroma collection names need >= 3 characters


@dataclass
class Running:
    """A Chroma server holding the 30 records sealed, and the sealed store over it."""

    server: ChromaServer
    client: Any
    store: SealedVectorStore
    ids: list[str]
    key: str


def _client(server: ChromaServer) -> Any:
    return chromadb.HttpClient(host=server.host, port=server.port, settings=Settings(anonymized_telemetry=False))


def _chroma(client: Any, collection: str = COLLECTION) -> Callable[[Embeddings], Any]:
    """A factory building the Chroma store of ``collection`` with the embeddings it is given."""
    return lambda embedding: Chroma(client=client, collection_name=collection, embedding_function=embedding)


def _sealed(client: Any, embeddings: Any, key: str, collection: str = COLLECTION) -> SealedVectorStore:
    return SealedVectorStore(
        _chroma(client, collection), embedding=embeddings, key=key, sealed_metadata=SEALED_FIELDS, fetch_k=None
    )


def _stop(server: ChromaServer) -> None:
    """Stop the server and check that no process of it is left."""
    server.stop()
    assert server.leftovers() == [], server.leftovers()


@pytest.fixture(scope="module")
def embeddings() -> ProtectedEmbeddings:
    return ProtectedEmbeddings()  # bundled MiniLM, the shipped policy (eps 1.0)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, embeddings: Any) -> Iterator[Running]:
    """One server for the read-only tests: the 30 records added through the sealed wrapper."""
    with no_chroma_default_embedding():
        server = ChromaServer(tmp_path_factory.mktemp("chroma-read") / "data").start()
        try:
            client, key = _client(server), generate_key()
            store = _sealed(client, embeddings, key)
            ids = store.add_documents(documents())  # UUID4s made by the wrapper
            yield Running(server, client, store, ids, key)
        finally:
            _stop(server)


@pytest.fixture(scope="module")
def query_vectors(minilm: Any) -> dict[str, Any]:
    return clean_query_vectors(minilm)


def test_each_text_retrieves_its_own_decrypted_document(running: Running, query_vectors: dict[str, Any]) -> None:
    check_each_text_finds_itself(running.store, running.ids, query_vectors["text"])


def test_paraphrased_questions_find_their_document(running: Running, query_vectors: dict[str, Any]) -> None:
    check_paraphrases_find_their_record(running.store, running.ids, query_vectors["question"])


@pytest.mark.filterwarnings("ignore:Relevance scores must be between")  # L2 relevance on non-unit vectors
def test_scores_retriever_mmr_and_get_by_ids(running: Running) -> None:
    check_scores_retriever_and_mmr(running.store, running.ids)
    ids = running.ids
    assert sorted(assert_opened(d, ids) for d in running.store.get_by_ids([ids[7], ids[2]])) == [2, 7]


def test_plain_fields_filter_and_sealed_fields_are_refused(running: Running) -> None:
    check_plain_filter_and_sealed_refusal(running.store, running.ids, filter={"category": "moves"})


def test_a_wrong_key_or_context_raises(running: Running) -> None:
    inner = running.store.store
    for other in (
        SealedVectorStore(inner, key=generate_key(), sealed_metadata=SEALED_FIELDS, fetch_k=None),
        SealedVectorStore(inner, key=running.key, sealed_metadata=SEALED_FIELDS, context="tenant-b", fetch_k=None),
    ):
        with pytest.raises(SealError):
            other.similarity_search(RECORDS[0].text, k=1)
        assert other.get_by_ids([running.ids[0]]) == []  # another key or tenant: its keyed id names no record


def test_two_stage_search_ranks_by_exact_cosine_and_the_engine_holds_no_clean_vector(
    running: Running, embeddings: Any, minilm: Any, tmp_path: Path
) -> None:
    store = two_stage_store(_chroma(running.client, "two-stage"), embeddings, generate_key())
    ids = add_two_stage_records(store)
    check_two_stage_hits(store, ids, minilm)
    raw = store.store.get(include=["documents", "metadatas", "embeddings"])  # what the server holds
    rows = [StoredRow(*row) for row in zip(raw["documents"], raw["metadatas"], raw["embeddings"], strict=True)]
    check_two_stage_rows(rows, minilm, tmp_path)


def test_app_index_mode_ranks_in_the_app_and_the_engine_holds_no_rankable_vector(
    running: Running, embeddings: Any, minilm: Any, tmp_path: Path
) -> None:
    store = app_index_store(_chroma(running.client, "app-index"), embeddings, generate_key())
    ids = add_two_stage_records(store)
    check_two_stage_hits(store, ids, minilm)
    raw = store.store.get(include=["documents", "metadatas", "embeddings"])  # what the server holds
    rows = [StoredRow(*row) for row in zip(raw["documents"], raw["metadatas"], raw["embeddings"], strict=True)]
    check_two_stage_rows(rows, minilm, tmp_path, mode="index")


async def test_delete_and_async_then_no_plaintext_on_disk(tmp_path: Path, embeddings: Any) -> None:
    """Sync and async writes and a delete on a fresh server, then its stopped data directory is scanned."""
    with no_chroma_default_embedding():
        server = ChromaServer(tmp_path / "data").start()
        try:
            client, key = _client(server), generate_key()
            store = _sealed(client, embeddings, key)
            inner = store.store
            ids = store.add_documents(documents())
            store.delete([ids[1]])
            assert store.get_by_ids([ids[1]]) == []
            assert RECORDS[1].text not in [h.page_content for h in store.similarity_search(RECORDS[1].text, k=29)]
            token = inner.get(ids=store.store_ids(ids[:1]))["documents"][0]  # record 0's sealed text in Chroma

            astore = _sealed(client, embeddings, key, "sealed-async")
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
            await astore.adelete([aids[3]])
            assert await astore.aget_by_ids([aids[3]]) == []
            assert [d.page_content for d in await astore.aget_by_ids([aids[4]])] == [RECORDS[4].text]
        finally:
            _stop(server)  # everything is in chroma.sqlite3 now (rollback journal, no -wal file)

    files = {f.name: f for f in scanned_files([server.path])}
    assert "chroma.sqlite3" in files and token.encode() in files["chroma.sqlite3"].read_bytes()  # the data is there
    hits = scan_for_plaintext([server.path], SECRETS)
    assert hits == [], "\n".join(map(str, hits[:10]))


def test_the_scan_finds_every_text_in_an_unsealed_store(tmp_path: Path, embeddings: Any) -> None:
    """Negative control: the same documents on the same engine, unsealed: every text is on disk."""
    with no_chroma_default_embedding():
        server = ChromaServer(tmp_path / "data").start()
        try:
            _chroma(_client(server))(embeddings).add_documents(documents())
        finally:
            _stop(server)
    hits = scan_for_plaintext([server.path], SECRETS)
    assert {h.text_index for h in hits if h.kind == "text"} == set(range(len(SECRETS)))
    assert len({(h.text_index, h.needle) for h in hits if h.kind == "fragment"}) > 20 * len(RECORDS)


def test_a_chroma_http_client_takes_calls_from_two_threads_and_an_in_process_one_does_not(running: Running) -> None:
    """The store-held index compacts in a background thread only where the store's client is a server's: over
    ``chromadb.HttpClient``, not over the in-process ``EphemeralClient``."""
    assert serves_concurrent_calls(running.store.store) and serves_concurrent_calls(running.client)
    assert not serves_concurrent_calls(
        Chroma(
            client=chromadb.EphemeralClient(), collection_name="in-process", embedding_function=FakeEmbeddings(size=4)
        )
    )
