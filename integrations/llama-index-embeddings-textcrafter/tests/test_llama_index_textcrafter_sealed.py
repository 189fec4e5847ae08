"""Sealed documents end to end in LlamaIndex: Qdrant (local mode, keeps text) and FAISS (keeps none).

30 synthetic documents full of personal data (``textcrafter_rag.testing.pii_records``, seeded) are
indexed with ``ProtectedEmbedding`` (bundled MiniLM, shipped policy) through
``sealed_storage_context``: the vector store wrapped in a ``SealedVectorStore`` (Qdrant's payload
gets only shell nodes) and a sealed docstore/index store (where FAISS's text lives). The Qdrant
directory and ``storage_context.persist``'s directory are scanned byte by byte for each text, each
3-word fragment and each sealed metadata value: nothing may be found, while retrieval returns the
right nodes. The same scan over the unsealed pipeline finds every text (so the scan can fail).
Retrieval thresholds: see ``pii_records`` (own text always rank 1, question top 3 >= 28/30).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import (
    ProtectedEmbedding,
    SealedKVStore,
    SealedVectorStore,
    sealed_storage_context,
)
from textcrafter_rag.sealing import SealError, generate_key
from textcrafter_rag.testing import pii_records, scan_for_plaintext, scanned_files
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

faiss = pytest.importorskip("faiss")
FaissMapVectorStore = pytest.importorskip("llama_index.vector_stores.faiss").FaissMapVectorStore
QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models

RECORDS = pii_records(30)
SECRETS = [s for r in RECORDS for s in r.secrets]
COLLECTION = "sealed-nodes"
KINDS = ("qdrant", "faiss")
#: This file tests the single-stage pipeline (ProtectedEmbedding, the store ranks the protected vectors): named
#: explicitly, since the default of a store that reads by id (Qdrant) is now the store-held index.
SINGLE: dict[str, Any] = {"search": None}


def _documents(records: Any = RECORDS) -> list[Document]:
    """One Document per record; metadata kept out of the embedded text, so the vector is the text's."""
    return [
        Document(
            text=r.text,
            id_=f"doc-{r.metadata['n']}",
            metadata=dict(r.metadata),
            excluded_embed_metadata_keys=list(r.metadata),
            excluded_llm_metadata_keys=list(r.metadata),
        )
        for r in records
    ]


def _vector_store(kind: str, path: Path) -> tuple[Any, QdrantClient | None]:
    if kind == "faiss":
        return FaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatL2(384))), None
    client = QdrantClient(path=str(path / "qdrant"))
    if not client.collection_exists(COLLECTION):
        params = models.VectorParams(size=384, distance=models.Distance.DOT)  # DOT stores the release as is
        client.create_collection(COLLECTION, vectors_config=params)
    return QdrantVectorStore(client=client, collection_name=COLLECTION), client


@dataclass
class Built:
    kind: str
    index: VectorStoreIndex
    path: Path  # everything written: the Qdrant directory and/or storage_context.persist's
    key: str
    client: QdrantClient | None


@pytest.fixture(scope="module")
def embed_model() -> ProtectedEmbedding:
    return ProtectedEmbedding()  # bundled MiniLM, the shipped policy (eps 1.0)


def _open_inner(kind: str, path: Path) -> tuple[Any, QdrantClient | None]:
    """The vector store as persisted under ``path`` (FAISS from its file, Qdrant from its directory)."""
    if kind == "faiss":
        return FaissMapVectorStore.from_persist_dir(str(path / "storage")), None
    return _vector_store(kind, path)


def _load(inner: Any, path: Path, embed_model: Any, *, key: str, context: str = "") -> VectorStoreIndex:
    ctx = sealed_storage_context(
        vector_store=inner,
        key=key,
        sealed_metadata=SEALED_FIELDS,
        context=context,
        persist_dir=path / "storage",
        **SINGLE,
    )
    return load_index_from_storage(ctx, embed_model=embed_model)


@pytest.fixture(scope="module", params=KINDS)
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embed_model: Any
) -> Iterator[Built]:
    """Index every record through the sealed storage context, persist, close, reload from disk."""
    kind, key = request.param, generate_key()
    path = tmp_path_factory.mktemp(f"llama-sealed-{kind}")
    inner, client = _vector_store(kind, path)
    ctx = sealed_storage_context(vector_store=inner, key=key, sealed_metadata=SEALED_FIELDS, **SINGLE)
    VectorStoreIndex.from_documents(_documents(), storage_context=ctx, embed_model=embed_model)
    ctx.persist(str(path / "storage"))
    if client is not None:
        client.close()
    inner, client = _open_inner(kind, path)
    index = _load(inner, path, embed_model, key=key)
    yield Built(kind, index, path, key, client)
    if client is not None:
        client.close()


def _check_node(node: Any) -> int:
    """A retrieved node is its record exactly: text, metadata (sealed fields included), source id."""
    n = node.metadata["n"]
    assert node.get_content() == RECORDS[n].text and node.metadata == RECORDS[n].metadata
    assert node.ref_doc_id == f"doc-{n}" and node.source_node.metadata == RECORDS[n].metadata
    return n


def test_no_text_fragment_or_sealed_value_in_any_file(built: Built) -> None:
    names = {f.name for f in scanned_files([built.path])}
    assert {"docstore.json", "index_store.json"} <= names
    assert ("default__vector_store.json" if built.kind == "faiss" else "storage.sqlite") in names
    hits = scan_for_plaintext([built.path], SECRETS)
    assert hits == [], "\n".join(map(str, hits[:10]))


@pytest.mark.parametrize("kind", KINDS)
def test_the_scan_finds_every_text_in_an_unsealed_pipeline(kind: str, tmp_path: Path, embed_model: Any) -> None:
    """Negative control: the same pipeline with LlamaIndex's own storage context."""
    inner, client = _vector_store(kind, tmp_path)
    ctx = StorageContext.from_defaults(vector_store=inner)
    VectorStoreIndex.from_documents(_documents(), storage_context=ctx, embed_model=embed_model)
    ctx.persist(str(tmp_path / "storage"))
    if client is not None:
        client.close()
    hits = scan_for_plaintext([tmp_path], SECRETS)
    assert {h.text_index for h in hits if h.kind == "text"} == set(range(len(SECRETS)))


@pytest.fixture(scope="module")
def query_bundles(minilm: Any) -> dict[str, list[QueryBundle]]:
    """Clean MiniLM query vectors in two batches (queries are not protected): one bundle per record."""
    out = {}
    for kind in ("text", "question"):
        strings = [getattr(r, kind) for r in RECORDS]
        out[kind] = [QueryBundle(query_str=q, embedding=v.tolist()) for q, v in zip(strings, minilm.encode(strings))]
    return out


def test_each_text_retrieves_its_own_node(built: Built, query_bundles: dict[str, list[QueryBundle]]) -> None:
    retriever = built.index.as_retriever(similarity_top_k=3)
    for i, bundle in enumerate(query_bundles["text"]):
        ranked = [_check_node(h.node) for h in retriever.retrieve(bundle)]
        assert ranked[0] == i  # every hit opened, the own node first


def test_paraphrased_questions_find_their_node(built: Built, query_bundles: dict[str, list[QueryBundle]]) -> None:
    retriever = built.index.as_retriever(similarity_top_k=3)
    found = sum(
        i in [_check_node(h.node) for h in retriever.retrieve(b)] for i, b in enumerate(query_bundles["question"])
    )
    assert found >= 27, found  # measured >= 28 of 30
    by_text = [_check_node(h.node) for h in retriever.retrieve(RECORDS[5].question)]  # embedded by the index
    assert by_text == [_check_node(h.node) for h in retriever.retrieve(query_bundles["question"][5])]


def test_the_vector_store_holds_only_shells(built: Built) -> None:
    store = built.index.vector_store
    assert isinstance(store, SealedVectorStore) and store.stores_text is (built.kind == "qdrant")
    if built.kind == "qdrant":
        shells = [p for p in built.client.scroll(COLLECTION, limit=100, with_payload=True)[0] if "n" in p.payload]
        payload = shells[0].payload  # a node's shell (the collection also holds the store's marker record)
        assert set(payload) >= {"_node_content", "category", "n", "doc_id"} and not set(SEALED_FIELDS) & set(payload)
        assert '"metadata": {}' in payload["_node_content"]  # the source relationship lost its metadata
        held = [p.id for p in shells[:2]]  # the store's ids, not the nodes'
        nodes = [store.open_node(shell) for shell in store.store.get_nodes(held)]
        assert len(nodes) == 2 and all(_check_node(n) in range(30) for n in nodes)
    docs = built.index.docstore.docs  # nodes live in the docstore only for a store that keeps no text
    assert {_check_node(n) for n in docs.values()} == (set(range(30)) if built.kind == "faiss" else set())
    assert len(built.index.docstore.get_all_document_hashes()) >= 30  # hashes of the plaintexts: sealed on disk


@pytest.mark.parametrize("kind", KINDS)
async def test_async_insert_retrieve_and_delete(kind: str, tmp_path: Path, embed_model: Any) -> None:
    aclient = None
    if kind == "faiss":
        inner, _ = _vector_store(kind, tmp_path)
    else:  # async only: local mode allows one client per directory
        aclient = AsyncQdrantClient(path=str(tmp_path / "qdrant"))
        params = models.VectorParams(size=384, distance=models.Distance.DOT)
        await aclient.create_collection(COLLECTION, vectors_config=params)
        inner = QdrantVectorStore(aclient=aclient, collection_name=COLLECTION)
    ctx = sealed_storage_context(vector_store=inner, key=generate_key(), sealed_metadata=SEALED_FIELDS, **SINGLE)
    index = VectorStoreIndex([], storage_context=ctx, embed_model=embed_model, use_async=True)
    await index.ainsert_nodes(SentenceSplitter().get_nodes_from_documents(_documents(RECORDS[:6])))
    hits = await index.as_retriever(similarity_top_k=2).aretrieve(RECORDS[2].text)
    assert _check_node(hits[0].node) == 2
    if kind == "qdrant":
        await index.adelete_ref_doc("doc-2")
    else:  # FAISS deletes by node id
        await index.adelete_nodes([hits[0].node.node_id], delete_from_docstore=True)
    after = await index.as_retriever(similarity_top_k=6).aretrieve(RECORDS[2].text)
    assert len(after) == 5 and 2 not in [_check_node(h.node) for h in after]
    ctx.persist(str(tmp_path / "storage"))
    if aclient is not None:
        await aclient.close()
    assert scan_for_plaintext([tmp_path], [s for r in RECORDS[:6] for s in r.secrets]) == []


def _flip(token: str) -> str:
    return token[:40] + ("A" if token[40] != "A" else "B") + token[41:]


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_key_and_tampering_raise(kind: str, tmp_path: Path, embed_model: Any) -> None:
    key = generate_key()
    inner, client = _vector_store(kind, tmp_path)
    ctx = sealed_storage_context(vector_store=inner, key=key, sealed_metadata=SEALED_FIELDS, **SINGLE)
    VectorStoreIndex.from_documents(_documents(RECORDS[:3]), storage_context=ctx, embed_model=embed_model)
    ctx.persist(str(tmp_path / "storage"))
    if client is not None:
        client.close()
    inner, client = _open_inner(kind, tmp_path)
    query = RECORDS[0].text
    try:
        for wrong in ({"key": generate_key()}, {"key": key, "context": "tenant-b"}):
            with pytest.raises(SealError):  # the index store (then the docstore) opens nothing
                _load(inner, tmp_path, embed_model, **wrong)
            if kind == "qdrant":
                with pytest.raises(SealError):  # nor does the vector store's payload
                    SealedVectorStore(inner, **wrong, **SINGLE).query(_query(embed_model, query))
            with pytest.raises(SealError):  # nor the docstore
                _sealed_docstore(tmp_path, **wrong).get_all_document_hashes()
        index = _load(inner, tmp_path, embed_model, key=key)
        assert _check_node(index.as_retriever(similarity_top_k=1).retrieve(query)[0].node) == 0
        if kind == "faiss":  # one sealed docstore value edited on disk
            docstore = tmp_path / "storage" / "docstore.json"
            data = json.loads(docstore.read_text())
            entry = next(iter(data["docstore/data"].values()))
            entry["_tc_sealed"] = _flip(entry["_tc_sealed"])
            docstore.write_text(json.dumps(data))
            with pytest.raises(SealError):
                _load(inner, tmp_path, embed_model, key=key).as_retriever(similarity_top_k=3).retrieve(query)
            return
        shells = [p for p in client.scroll(COLLECTION, with_payload=True)[0] if "n" in p.payload]  # not the marker
        points = sorted(shells, key=lambda p: p.payload["n"])
        first = dict(points[0].payload)
        shell = json.loads(first["_node_content"])
        edited = {**first, "_node_content": json.dumps({**shell, "text": _flip(shell["text"])})}
        client.overwrite_payload(COLLECTION, payload=edited, points=[points[0].id])
        with pytest.raises(SealError):
            index.as_retriever(similarity_top_k=3).retrieve(query)
        client.overwrite_payload(COLLECTION, payload=first, points=[points[0].id])
        assert _check_node(index.as_retriever(similarity_top_k=1).retrieve(query)[0].node) == 0
        client.overwrite_payload(COLLECTION, payload=first, points=[points[1].id])  # record 0 copied onto point 1
        with pytest.raises(SealError, match="moved"):
            index.as_retriever(similarity_top_k=3).retrieve(query)
    finally:
        if client is not None:
            client.close()


def _sealed_docstore(path: Path, *, key: str, context: str = "") -> SimpleDocumentStore:
    kv = SealedKVStore.from_persist_path(str(path / "storage" / "docstore.json"), key=key, context=context)
    return SimpleDocumentStore(simple_kvstore=kv)


def _query(embed_model: Any, text: str) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=embed_model.get_query_embedding(text), similarity_top_k=1)
