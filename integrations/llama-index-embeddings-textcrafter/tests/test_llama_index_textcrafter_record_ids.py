"""Issue 29.2 in LlamaIndex: Qdrant holds keyed node and source-document ids; your ids go in and come out."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any
from unittest import mock

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import SealedVectorStore, sealed_storage_context
from textcrafter_rag.sealed.records import IDS_KEY
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import FakeBase

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(10)]
#: ``search=None``: single-stage, named since the default is now the store-held index (tested here too).
MODES: dict[str, Any] = {"single": {"search": None}, "candidates": {"fetch_k": 11}, "store-index": {}}


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=32))


def _nodes(node_ids: list[str], doc_ids: list[str]) -> list[TextNode]:
    nodes = []
    for text, nid, did in zip(TEXTS, node_ids, doc_ids, strict=True):
        node = TextNode(id_=nid, text=text)  # no metadata: embedded as the text alone
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=did)
        nodes.append(node)
    return nodes


def _index(base: FakeBase, client: QdrantClient, key: str, nodes: list[TextNode], **options: Any) -> VectorStoreIndex:
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(client=client, collection_name="notes"), key=key, **options
    )
    return VectorStoreIndex(nodes, storage_context=ctx, embed_model=base)


def _held(client: QdrantClient) -> str:
    """Every point id and payload Qdrant holds, as one string."""
    points, _ = client.scroll("notes", limit=100, with_payload=True)
    return json.dumps([[str(p.id), p.payload] for p in points])


def _top(store: SealedVectorStore, base: FakeBase, i: int) -> TextNode:
    result = store.query(VectorStoreQuery(query_embedding=base.doc(TEXTS[i]), similarity_top_k=1))
    assert result.ids == [result.nodes[0].node_id]  # your ids in the result too
    return result.nodes[0]


@pytest.mark.parametrize("mode", list(MODES))
def test_qdrant_holds_no_node_or_document_id_and_reads_and_deletes_use_yours(base, mode: str) -> None:
    client = QdrantClient(":memory:")
    node_ids, doc_ids = [f"note-{i}" for i in range(10)], [f"patient-{1230 + i}" for i in range(10)]
    index = _index(base, client, generate_key(), _nodes(node_ids, doc_ids), **MODES[mode])
    store = index.vector_store
    held = _held(client)
    assert "note-" not in held and "patient-" not in held  # point ids, doc_id/ref_doc_id/document_id, _tc_id
    assert set(store.store_ids(doc_ids[:1])) <= {p.payload.get("doc_id") for p in client.scroll("notes", limit=100)[0]}
    top = _top(store, base, 3)
    assert (top.node_id, top.ref_doc_id, top.get_content()) == (node_ids[3], doc_ids[3], TEXTS[3])
    assert {n.node_id for n in store.get_nodes([node_ids[1], node_ids[2]])} == {node_ids[1], node_ids[2]}
    index.delete_ref_doc(doc_ids[3])  # LlamaIndex's delete by source document
    assert store.get_nodes([node_ids[3]]) == [] and _top(store, base, 3).node_id != node_ids[3]
    index.delete_nodes([node_ids[4]])
    assert store.get_nodes([node_ids[4]]) == [] and len(store.get_nodes(node_ids)) == 8
    retrieved = index.as_retriever(similarity_top_k=2).retrieve(TEXTS[5])
    assert (
        len(retrieved) == 2
        and {h.node.node_id for h in retrieved} <= set(node_ids)
        and all(h.node.ref_doc_id in doc_ids for h in retrieved)
    )


def test_two_tenants_under_one_key_hold_unrelated_ids(base) -> None:
    key = generate_key()
    a = SealedVectorStore(QdrantVectorStore(client=QdrantClient(":memory:"), collection_name="a"), key=key)
    b = SealedVectorStore(
        QdrantVectorStore(client=QdrantClient(":memory:"), collection_name="b"), key=key, context="t2"
    )
    ids = ["note-1", "patient-7"]
    assert not set(a.store_ids(ids)) & set(b.store_ids(ids)) and all(
        uuid.UUID(i).version == 4 for i in a.store_ids(ids)
    )
    clear = SealedVectorStore(
        QdrantVectorStore(client=QdrantClient(":memory:"), collection_name="c"), key=key, record_ids="clear"
    )
    assert clear.store_ids(ids) == ids and clear.record_ids == "clear"


@pytest.mark.parametrize("mode", list(MODES))
def test_a_store_written_with_clear_ids_still_searches_reads_and_deletes(base, mode: str) -> None:
    """The previous release: shells under the nodes' own ids (UUIDs, as Qdrant requires), a marker naming no scheme."""
    client, key = QdrantClient(":memory:"), generate_key()
    node_ids = [str(uuid.uuid4()) for _ in range(10)]
    doc_ids = [str(uuid.uuid4()) for _ in range(10)]
    old = _index(base, client, key, [], **MODES[mode], record_ids="clear")
    old.insert_nodes(_nodes(node_ids, doc_ids))
    points, _ = client.scroll("notes", limit=100, with_payload=True)
    assert set(node_ids) <= {str(p.id) for p in points}
    for p in points:
        if IDS_KEY in p.payload:
            client.delete_payload("notes", keys=[IDS_KEY], points=[p.id])
    unsaid = _index(base, client, key, [], **MODES[mode]).vector_store  # keyed, and told nothing of clear ids
    assert unsaid.get_nodes([node_ids[2]]) == []  # no clear id is looked up (or sent) unless the caller says so
    index = _index(base, client, key, [], **MODES[mode], legacy_clear_ids=True)  # this release, keyed by default
    store = index.vector_store
    assert _top(store, base, 6).node_id == node_ids[6]
    assert [n.get_content() for n in store.get_nodes([node_ids[2]])] == [TEXTS[2]]
    index.delete_ref_doc(doc_ids[2])
    assert store.get_nodes([node_ids[2]]) == []
    store.delete_nodes([node_ids[7]])
    assert store.get_nodes([node_ids[7]]) == []
    index.insert_nodes(_nodes(["note-new", *node_ids[1:]], ["patient-new", *doc_ids[1:]])[:1])  # new shells: keyed
    assert "note-new" not in _held(client) and "patient-new" not in _held(client)
    assert {n.node_id for n in store.get_nodes(["note-new", node_ids[8]])} == {"note-new", node_ids[8]}


def test_a_store_that_keeps_no_text_holds_sealed_ids_and_the_index_maps_them_back(base, tmp_path) -> None:
    """SimpleVectorStore answers with ids alone, which the index maps to its nodes: the key turns sealed ids back."""
    from llama_index.core import load_index_from_storage
    from llama_index.core.vector_stores import SimpleVectorStore

    key, persist = generate_key(), tmp_path / "storage"
    node_ids, doc_ids = [f"note-{i}" for i in range(10)], [f"patient-{1230 + i}" for i in range(10)]
    ctx = sealed_storage_context(vector_store=SimpleVectorStore(), key=key)
    index = VectorStoreIndex(_nodes(node_ids, doc_ids), storage_context=ctx, embed_model=base)
    assert index.vector_store.record_ids == "sealed"
    held = json.dumps(index.vector_store.store.data.to_dict())
    assert "note-" not in held and "patient-" not in held  # node ids, ref_doc ids: sealed
    hits = index.as_retriever(similarity_top_k=3).retrieve(TEXTS[2])
    assert (
        len(hits) == 3
        and {h.node.node_id for h in hits} <= set(node_ids)
        and all(h.node.ref_doc_id in doc_ids for h in hits)
    )
    index.delete_nodes([node_ids[4]], delete_from_docstore=True)
    index.delete_ref_doc(doc_ids[5], delete_from_docstore=True)
    ctx.persist(str(persist))
    assert "note-" not in (persist / "default__vector_store.json").read_text()
    reopened = sealed_storage_context(
        vector_store=SimpleVectorStore.from_persist_dir(str(persist)), key=key, persist_dir=persist
    )
    again = load_index_from_storage(reopened, embed_model=base)
    found = {h.node.node_id for h in again.as_retriever(similarity_top_k=10).retrieve(TEXTS[1])}
    assert found == set(node_ids) - {node_ids[4], node_ids[5]}


@pytest.mark.parametrize("record_ids", ["keyed", "clear"])
def test_the_audit_names_the_id_scheme_of_qdrant_payloads(base, tmp_path, record_ids: str) -> None:
    from textcrafter_rag.audit.store import load_sample

    client = QdrantClient(":memory:")
    node_ids = [str(uuid.uuid4()) for _ in range(10)]  # UUIDs: what Qdrant takes as clear ids
    _index(base, client, generate_key(), _nodes(node_ids, node_ids), record_ids=record_ids)
    points, _ = client.scroll("notes", limit=100, with_payload=True, with_vectors=True)
    rows = "".join(json.dumps({"embedding": p.vector, "id": str(p.id), "payload": p.payload}) + "\n" for p in points)
    (tmp_path / "export.jsonl").write_text(rows, encoding="utf-8")
    assert load_sample(tmp_path / "export.jsonl", n=10, progress=False).record_ids == record_ids


def _recording(cls: type, names: tuple[str, ...]) -> tuple[list[str], Any]:
    """What every call of these methods of a store class is given (as text), and the patches recording it."""
    sent: list[str] = []
    patches = []
    for name in names:
        original = getattr(cls, name)

        def record(self, *args, _name=name, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(repr((_name, args, kwargs)))
            return _original(self, *args, **kwargs)

        patches.append(mock.patch.object(cls, name, record))
    stack = contextlib.ExitStack()
    for patch in patches:
        stack.enter_context(patch)
    return sent, stack


@pytest.mark.parametrize("mode", list(MODES))
def test_no_clear_node_or_document_id_reaches_the_store_unless_the_caller_says_so(base, mode: str) -> None:
    """Misses, ``delete_ref_doc`` and a retriever's ``doc_ids`` sent the user's ids unless the marker said keyed only.

    Single-stage stores write no marker (and a host can delete or edit one), so every ``refresh_ref_docs``,
    ``update_ref_doc``, ``get_nodes`` miss and ``as_retriever(doc_ids=...)`` query handed the store clear ids.
    """
    client, key = QdrantClient(":memory:"), generate_key()
    node_ids, doc_ids = [f"note-{i}" for i in range(10)], [f"patient-{1230 + i}" for i in range(10)]
    index = _index(base, client, key, _nodes(node_ids, doc_ids), **MODES[mode])
    store = index.vector_store
    sent, recording = _recording(type(store.store), ("get_nodes", "delete", "delete_nodes", "query"))
    with recording:
        assert store.get_nodes(["note-missing"]) == []
        index.delete_ref_doc(doc_ids[2])
        index.delete_ref_doc(doc_ids[2])  # already deleted: a miss
        store.delete_nodes([node_ids[3]])
        assert store.get_nodes([node_ids[3]]) == []
        if mode != "store-index":  # a retriever restricted to one source document
            hits = index.as_retriever(doc_ids=[doc_ids[4]], similarity_top_k=1).retrieve(TEXTS[4])
            assert [h.node.node_id for h in hits] == [node_ids[4]]
    assert sent and not [s for s in sent if "note-" in s or "patient-" in s]
    assert "note-" not in _held(client) and "patient-" not in _held(client)


def test_a_store_that_keeps_no_text_is_sent_no_clear_id(base) -> None:
    """Its sealed ids were never treated as keyed only: every delete also sent the clear node and document ids."""
    from llama_index.core.vector_stores import SimpleVectorStore

    node_ids, doc_ids = [f"note-{i}" for i in range(10)], [f"patient-{1230 + i}" for i in range(10)]
    ctx = sealed_storage_context(vector_store=SimpleVectorStore(), key=generate_key())
    index = VectorStoreIndex(_nodes(node_ids, doc_ids), storage_context=ctx, embed_model=base)
    assert index.vector_store.record_ids == "sealed"
    sent, recording = _recording(SimpleVectorStore, ("delete", "delete_nodes", "query"))
    with recording:
        index.delete_nodes([node_ids[4]], delete_from_docstore=True)
        index.delete_ref_doc(doc_ids[5], delete_from_docstore=True)
        index.as_retriever(similarity_top_k=3).retrieve(TEXTS[2])
    assert sent and not [s for s in sent if "note-" in s or "patient-" in s]
