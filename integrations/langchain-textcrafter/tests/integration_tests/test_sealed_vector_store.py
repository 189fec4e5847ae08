"""Sealed documents end to end: Qdrant (local mode, on disk) and FAISS (``save_local``) through ``SealedVectorStore``.

30 synthetic documents full of personal data (``textcrafter_rag.testing.pii_records``, seeded) go
through ``ProtectedEmbeddings`` (bundled MiniLM, shipped policy) and a ``SealedVectorStore`` that
also seals the ``author`` and ``email`` metadata. Then every byte the backend wrote is scanned for
each text, each 3-word fragment of it and each sealed value: nothing may be found, while retrieval
returns the right decrypted documents. The same scan over an unsealed store finds every text (so the
scan can fail), and a wrong key, a tampered ciphertext or a record copied to another point raise
``SealError``. A two-stage store (``fetch_k=``) is checked on both engines too
(``_two_stage_engine_checks.py``): exact cosine scores, sealed clean vectors, only noised vectors stored.

Retrieval thresholds (``pii_records``' docstring): over 40 independent protections the own text was
always rank 1 (dot and L2), the paraphrased question within the top 3 for >= 28 of 30.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError, TwoStageSearch
from textcrafter_rag.sealed.core import SkippedRecordsWarning
from textcrafter_rag.sealed.records import canonical_record_id
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import pii_records, scan_for_plaintext, scanned_files
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

faiss = pytest.importorskip("faiss")
FAISS = pytest.importorskip("langchain_community.vectorstores").FAISS
InMemoryDocstore = pytest.importorskip("langchain_community.docstore.in_memory").InMemoryDocstore
QdrantVectorStore = pytest.importorskip("langchain_qdrant").QdrantVectorStore
qdrant_client = pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient, models

from ._two_stage_engine_checks import (
    StoredRow,
    add_two_stage_records,
    check_two_stage_hits,
    check_two_stage_rows,
    two_stage_store,
)

RECORDS = pii_records(30)
SECRETS = [s for r in RECORDS for s in r.secrets]
COLLECTION = "sealed-docs"
KINDS = ("qdrant", "faiss")


def _docs(records: Any = RECORDS) -> list[Document]:
    return [Document(page_content=r.text, metadata=dict(r.metadata)) for r in records]


def _faiss(embedding: Embeddings) -> Any:
    """A fresh FAISS store (exact L2) built with ``embedding``: the factory a sealed store is given."""
    return FAISS(
        embedding_function=embedding,
        index=faiss.IndexFlatL2(384),
        docstore=InMemoryDocstore(),
        index_to_docstore_id={},
    )


def _faiss_loaded(path: Path) -> Callable[[Embeddings], Any]:
    """A factory reopening the FAISS store saved under ``path`` with the embeddings it is given."""
    return lambda embedding: FAISS.load_local(str(path), embedding, allow_dangerous_deserialization=True)


def _qdrant_client(path: Path) -> QdrantClient:
    """Local mode on disk under ``path``, with the (DOT) collection created on first use."""
    client = QdrantClient(path=str(path))
    if not client.collection_exists(COLLECTION):
        params = models.VectorParams(size=384, distance=models.Distance.DOT)
        client.create_collection(COLLECTION, vectors_config=params)
    return client


def _qdrant(client: QdrantClient) -> Callable[[Embeddings], Any]:
    """A factory building the Qdrant store over ``client`` with the embeddings it is given."""
    return lambda embedding: QdrantVectorStore(
        client=client, collection_name=COLLECTION, embedding=embedding, distance=models.Distance.DOT
    )


def _sealed(store: Callable[[Embeddings], Any], embeddings: Any, key: str) -> SealedVectorStore:
    return SealedVectorStore(store, embedding=embeddings, key=key, sealed_metadata=SEALED_FIELDS)


@dataclass
class Built:
    """A sealed store reopened from what the backend wrote under ``path``."""

    kind: str
    store: SealedVectorStore
    path: Path
    ids: list[Any]  # the record id of RECORDS[i]
    key: str
    client: QdrantClient | None = None


@pytest.fixture(scope="module")
def embeddings() -> ProtectedEmbeddings:
    return ProtectedEmbeddings()  # bundled MiniLM, the shipped policy (eps 1.0)


@pytest.fixture(scope="module", params=KINDS)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embeddings: Any) -> Iterator[Built]:
    """Ingest all records through the sealed wrapper, persist, close, and reopen from disk."""
    kind, key = request.param, generate_key()
    path = tmp_path_factory.mktemp(f"sealed-{kind}")
    if kind == "faiss":
        ids = [f"doc-{i}" for i in range(len(RECORDS))]  # caller ids
        written = _sealed(_faiss, embeddings, key)
        assert written.add_documents(_docs(), ids=ids) == ids
        written.store.save_local(str(path))
        yield Built(kind, _sealed(_faiss_loaded(path), embeddings, key), path, ids, key)
        return
    client = _qdrant_client(path)
    ids = _sealed(_qdrant(client), embeddings, key).add_documents(_docs())  # UUID4s made
    client.close()  # local mode: everything is on disk now; reopen from the path
    client = _qdrant_client(path)
    yield Built(kind, _sealed(_qdrant(client), embeddings, key), path, ids, key, client)
    client.close()


def _small(kind: str, path: Path, embeddings: Any, key: str) -> tuple[SealedVectorStore, Any]:
    """A fresh sealed store (function scope) for tests that write to it."""
    if kind == "faiss":
        return _sealed(_faiss, embeddings, key), None
    client = _qdrant_client(path)
    return _sealed(_qdrant(client), embeddings, key), client


def _assert_opened(hit: Document, built: Built) -> int:
    """The hit is a record exactly as it went in (sealed fields decrypted), under its own id."""
    n = hit.metadata["n"]
    expected = RECORDS[n]
    assert hit.page_content == expected.text
    assert {k: hit.metadata[k] for k in expected.metadata} == expected.metadata
    assert "_tc_id" not in hit.metadata
    assert hit.id == canonical_record_id(built.ids[n])
    return n


# -- nothing readable on disk ---------------------------------------------------------------------


def test_no_text_fragment_or_sealed_value_in_any_file(built: Built) -> None:
    names = {f.name for f in scanned_files([built.path])}
    assert {"index.faiss", "index.pkl"} <= names if built.kind == "faiss" else "storage.sqlite" in names
    hits = scan_for_plaintext([built.path], SECRETS)
    assert hits == [], "\n".join(map(str, hits[:10]))


@pytest.mark.parametrize("kind", KINDS)
def test_the_scan_finds_every_text_in_an_unsealed_store(kind: str, tmp_path: Path, embeddings: Any) -> None:
    """Negative control: the same documents, same store, no sealing: every secret is on disk."""
    if kind == "faiss":
        FAISS.from_documents(_docs(), embeddings).save_local(str(tmp_path))
    else:
        client = _qdrant_client(tmp_path)
        _qdrant(client)(embeddings).add_documents(_docs())
        client.close()
    hits = scan_for_plaintext([tmp_path], SECRETS)
    assert {h.text_index for h in hits if h.kind == "text"} == set(range(len(SECRETS)))
    n_fragments = {(h.text_index, h.needle) for h in hits if h.kind == "fragment"}
    assert len(n_fragments) > 20 * len(RECORDS)  # ~25 fragments per text, all present


# -- retrieval works as on the wrapped store ------------------------------------------------------


@pytest.fixture(scope="module")
def query_vectors(minilm: Any) -> dict[str, Any]:
    """Clean MiniLM vectors of every text and question, in two batches: exactly what ``embed_query`` returns."""
    return {
        "text": minilm.encode([r.text for r in RECORDS]),
        "question": minilm.encode([r.question for r in RECORDS]),
    }


def test_each_text_retrieves_its_own_decrypted_document(built: Built, query_vectors: dict[str, Any]) -> None:
    for i, vector in enumerate(query_vectors["text"]):
        ranked = [_assert_opened(h, built) for h in built.store.similarity_search_by_vector(vector.tolist(), k=3)]
        assert ranked[0] == i  # every hit opened, the own document first


def test_paraphrased_questions_find_their_document(built: Built, query_vectors: dict[str, Any]) -> None:
    found = 0
    for i, vector in enumerate(query_vectors["question"]):
        hits = built.store.similarity_search_by_vector(vector.tolist(), k=3)
        found += i in [_assert_opened(h, built) for h in hits]
    assert found >= 27, found  # measured >= 28 of 30
    hits = built.store.similarity_search(RECORDS[5].question, k=3)  # the text path: the same ranking
    assert [_assert_opened(h, built) for h in hits] == [
        _assert_opened(h, built)
        for h in built.store.similarity_search_by_vector(query_vectors["question"][5].tolist(), k=3)
    ]


@pytest.mark.filterwarnings("ignore:Relevance scores must be between")  # FAISS's L2 relevance on non-unit vectors
def test_scores_retriever_mmr_and_get_by_ids(built: Built) -> None:
    store, record = built.store, RECORDS[4]
    scored = store.similarity_search_with_score(record.text, k=2)
    assert _assert_opened(scored[0][0], built) == 4 and len({float(s) for _, s in scored}) == 2
    relevance = store.similarity_search_with_relevance_scores(record.text, k=2)
    assert _assert_opened(relevance[0][0], built) == 4
    by_vector = store.similarity_search_by_vector(store.embeddings.embed_query(record.text), k=1)
    assert _assert_opened(by_vector[0], built) == 4
    retrieved = [_assert_opened(d, built) for d in store.as_retriever(search_kwargs={"k": 2}).invoke(record.text)]
    assert retrieved[0] == 4 and len(retrieved) == 2
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 3, "fetch_k": 10}).invoke(record.text)
    assert len(mmr) == 3 and _assert_opened(mmr[0], built) == 4
    got = store.get_by_ids([built.ids[7], built.ids[2]])
    assert sorted(_assert_opened(d, built) for d in got) == [2, 7]


def test_plain_fields_filter_and_sealed_fields_are_refused(built: Built) -> None:
    store, query = built.store, RECORDS[0].question
    if built.kind == "faiss":
        plain: Any = {"category": "moves"}
    else:
        plain = models.Filter(
            must=[models.FieldCondition(key="metadata.category", match=models.MatchValue(value="moves"))]
        )
    if not isinstance(store.search_options, TwoStageSearch):  # the store-held index: a store filter is refused
        with pytest.raises(ValueError, match="passes nothing to the store"):
            store.similarity_search(query, k=5, filter=plain)
    else:
        hits = store.similarity_search(query, k=5, filter=plain)
        assert len(hits) == 5 and all(h.metadata["category"] == "moves" for h in hits)
    with pytest.raises(ValueError, match="cannot filter on sealed"):
        store.similarity_search(query, k=5, filter={"author": RECORDS[0].metadata["author"]})


# -- writing: delete and async ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_delete_removes_the_document(kind: str, tmp_path: Path, embeddings: Any) -> None:
    store, client = _small(kind, tmp_path, embeddings, generate_key())
    ids = store.add_texts([r.text for r in RECORDS[:5]], [dict(r.metadata) for r in RECORDS[:5]])
    assert len(ids) == 5 and len(set(ids)) == 5
    assert store.similarity_search(RECORDS[1].text, k=1)[0].page_content == RECORDS[1].text
    store.delete([ids[1]])
    assert store.get_by_ids([ids[1]]) == []
    remaining = [h.page_content for h in store.similarity_search(RECORDS[1].text, k=5)]
    assert len(remaining) == 4 and RECORDS[1].text not in remaining
    if client is not None:
        client.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_async_add_search_retrieve_delete(kind: str, tmp_path: Path, embeddings: Any) -> None:
    store, client = _small(kind, tmp_path, embeddings, generate_key())
    docs = _docs(RECORDS[:6])
    docs[0].id = "00000000-0000-4000-8000-000000000001"  # a Document.id is used as the record id
    ids = await store.aadd_documents(docs)
    assert ids[0] == docs[0].id and len(set(ids)) == 6
    hits = await store.asimilarity_search(RECORDS[0].text, k=2)
    assert hits[0].page_content == RECORDS[0].text and hits[0].id == docs[0].id
    assert hits[0].metadata["author"] == RECORDS[0].metadata["author"]
    retrieved = await store.as_retriever(search_kwargs={"k": 1}).ainvoke(RECORDS[3].text)
    assert retrieved[0].page_content == RECORDS[3].text
    scored = await store.asimilarity_search_with_score(RECORDS[2].text, k=1)
    assert scored[0][0].page_content == RECORDS[2].text
    await store.adelete([ids[3]])
    assert await store.aget_by_ids([ids[3]]) == []
    assert [d.page_content for d in await store.aget_by_ids([ids[4]])] == [RECORDS[4].text]
    if client is not None:
        client.close()
        assert scan_for_plaintext([tmp_path], [s for r in RECORDS[:6] for s in r.secrets]) == []


# -- nothing opens where it should not -------------------------------------------------------------


def _stored(kind: str, store: SealedVectorStore, client: Any, record_id: Any) -> dict[str, Any]:
    """The raw stored text and metadata of one record (ciphertext), from the backend itself (under its keyed id)."""
    record_id = store.store_ids([record_id])[0]
    if kind == "faiss":
        doc = store.store.docstore.search(record_id)
        return {"page_content": doc.page_content, "metadata": doc.metadata}
    return client.retrieve(COLLECTION, ids=[record_id], with_payload=True)[0].payload


def _restore(kind: str, store: SealedVectorStore, client: Any, record_id: Any, payload: dict[str, Any]) -> None:
    record_id = store.store_ids([record_id])[0]
    if kind == "faiss":
        doc = store.store.docstore.search(record_id)
        doc.page_content, doc.metadata = payload["page_content"], payload["metadata"]
    else:
        client.overwrite_payload(COLLECTION, payload=payload, points=[record_id])


def _flip(token: str) -> str:
    return token[:30] + ("A" if token[30] != "A" else "B") + token[31:]


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_key_tampering_and_moved_records_raise(kind: str, tmp_path: Path, embeddings: Any) -> None:
    key = generate_key()
    store, client = _small(kind, tmp_path, embeddings, key)
    ids: list[Any] = ["a", "b", "c"]
    if kind == "qdrant":  # point ids must be UUIDs or unsigned ints
        ids = [canonical_record_id(f"00000000-0000-4000-8000-00000000000{i}") for i in range(3)]
    store.add_documents(_docs(RECORDS[:3]), ids=ids)
    query = RECORDS[0].text
    assert store.similarity_search(query, k=3)[0].page_content == RECORDS[0].text

    for other in (
        SealedVectorStore(store.store, key=generate_key(), sealed_metadata=SEALED_FIELDS),
        SealedVectorStore(store.store, key=key, sealed_metadata=SEALED_FIELDS, context="tenant-b"),
    ):
        with pytest.raises(SealError):
            other.similarity_search(query, k=1)

    original = _stored(kind, store, client, ids[0])
    edits = {
        "text": {**original, "page_content": _flip(original["page_content"])},
        "field": {**original, "metadata": {**original["metadata"], "email": _flip(original["metadata"]["email"])}},
        "plain": {**original, "metadata": {**original["metadata"], "author": "Injected Name"}},
        "swapped": {**original, "metadata": {**original["metadata"], "email": original["metadata"]["author"]}},
    }
    strict = SealedVectorStore(store.store, key=key, sealed_metadata=SEALED_FIELDS, strict=True)
    for name, payload in edits.items():
        _restore(kind, store, client, ids[0], payload)
        with pytest.raises(SealError):
            strict.similarity_search(query, k=1)
        with pytest.warns(SkippedRecordsWarning) if store.skipped == 0 else contextlib.nullcontext():
            hits = store.similarity_search(query, k=2)  # the edited record is skipped and counted, never returned
        assert RECORDS[0].text not in [h.page_content for h in hits], name
        with pytest.raises(SealError):
            store.get_by_ids([ids[0]])
        _restore(kind, store, client, ids[0], original)
        assert store.similarity_search(query, k=1)[0].page_content == RECORDS[0].text, name

    if kind == "qdrant":  # the whole payload of record 0 copied onto record 1's point
        _restore(kind, store, client, ids[1], original)
        with pytest.raises(SealError, match="moved"):
            store.get_by_ids([ids[1]])
        client.close()


# -- two-stage search (fetch_k=) -------------------------------------------------------------------


def _two_stage_rows(kind: str, store: SealedVectorStore, client: Any) -> list[StoredRow]:
    """Every record's text, metadata and vector as the engine holds them."""
    inner = store.store
    if kind == "faiss":
        return [
            StoredRow(doc.page_content, doc.metadata, inner.index.reconstruct(pos))
            for pos, doc in ((pos, inner.docstore.search(i)) for pos, i in inner.index_to_docstore_id.items())
        ]
    points, _ = client.scroll(COLLECTION, limit=100, with_payload=True, with_vectors=True)
    return [StoredRow(p.payload["page_content"], p.payload["metadata"], p.vector) for p in points]


@pytest.mark.parametrize("kind", KINDS)
def test_two_stage_search_ranks_by_exact_cosine_and_the_engine_holds_no_clean_vector(
    kind: str, tmp_path: Path, embeddings: Any, minilm: Any
) -> None:
    key = generate_key()
    if kind == "faiss":
        store, client = two_stage_store(_faiss, embeddings, key), None
    else:
        client = _qdrant_client(tmp_path / "qdrant")
        store = two_stage_store(_qdrant(client), embeddings, key)
    ids = add_two_stage_records(store)
    check_two_stage_hits(store, ids, minilm)
    check_two_stage_rows(_two_stage_rows(kind, store, client), minilm, tmp_path)
    if client is not None:
        client.close()


def test_from_texts_needs_a_factory_and_the_key_never_shows(embeddings: Any) -> None:
    key = generate_key()
    store = _sealed(_faiss, embeddings, key)
    with pytest.raises(TypeError, match="store="):
        SealedVectorStore.from_texts(["x"], embeddings)
    built = SealedVectorStore.from_texts([RECORDS[0].text], embeddings, store=_faiss, key=key, ids=["only"])
    assert [(d.id, d.page_content) for d in built.similarity_search(RECORDS[0].text, k=1)] == [
        ("only", RECORDS[0].text)
    ]
    assert key not in repr(store) and "redacted" in repr(store)
    assert store.embeddings is embeddings and store.sealed_metadata == SEALED_FIELDS


@pytest.mark.parametrize("kind", KINDS)
def test_meaningful_ids_never_reach_the_engine_and_come_back_on_every_read(
    kind: str, tmp_path: Path, embeddings: Any
) -> None:
    """Issue 29.2: the engine holds keyed UUIDs (so Qdrant now takes any id); the caller's ids go in and come out."""
    key, path = generate_key(), tmp_path / "engine"
    store, client = _small(kind, path, embeddings, key)
    ids = [f"patient-{1230 + i}" for i in range(4)]
    assert store.add_documents(_docs(RECORDS[:4]), ids=ids) == ids
    hit = store.similarity_search(RECORDS[2].text, k=1)[0]
    assert (hit.id, hit.page_content) == (ids[2], RECORDS[2].text)
    assert {d.id for d in store.get_by_ids(ids[:2])} == set(ids[:2])
    store.delete([ids[0]])
    assert store.get_by_ids([ids[0]]) == []
    target = SealedVectorStore(_faiss, embedding=embeddings, key=key, context="tenant-b", sealed_metadata=SEALED_FIELDS)
    assert store.copy_to(target, ids[1:3]) == ids[1:3]
    assert [d.page_content for d in target.get_by_ids([ids[1]])] == [RECORDS[1].text]
    assert not set(target.store_ids(ids)) & set(store.store_ids(ids))  # another tenant: unrelated keyed ids
    if kind == "faiss":
        store.store.save_local(str(path))
    else:
        client.close()
    written = b"".join(f.read_bytes() for f in path.rglob("*") if f.is_file())
    assert written and b"patient-" not in written  # in no id, payload or index file the engine wrote
