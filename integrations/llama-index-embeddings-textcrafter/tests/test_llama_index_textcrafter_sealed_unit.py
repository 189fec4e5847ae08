"""SealedVectorStore shells and SealedKVStore values, without an encoder: what reaches storage, what comes back."""

from __future__ import annotations

import asyncio
import json
import traceback
from pathlib import Path

import pytest
from llama_index.core.schema import Document, IndexNode, NodeRelationship, TextNode
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import (
    MetadataFilter,
    MetadataFilters,
    SimpleVectorStore,
    VectorStoreQuery,
)
from llama_index.core.vector_stores.utils import node_to_metadata_dict

from llama_index.embeddings.textcrafter import SealedKVStore, SealedVectorStore
from llama_index.embeddings.textcrafter.sealed_storage import SEALED_VALUE
from textcrafter_rag import SingleStageSearch
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealing import SealError, generate_key

SOURCE = Document(text="Jane Doe's full file.", metadata={"author": "Jane Doe", "topic": "moves"}, id_="doc-1")


def _node(text: str = "Jane Doe moved to 12 Elm Street, Leeds.", **kw: object) -> TextNode:
    node = TextNode(text=text, metadata={"author": "Jane Doe", "topic": "moves"}, embedding=[1.0, 0.0, 0.0], **kw)
    node.relationships[NodeRelationship.SOURCE] = SOURCE.as_related_node_info()
    return node


@pytest.fixture
def sealed() -> SealedVectorStore:
    inner = SimpleVectorStore()
    inner.stores_text = True  # as a text-keeping store (Qdrant, Chroma): it gets shells under keyed ids
    return SealedVectorStore(inner, key=generate_key(), sealed_metadata=("author",), search=SingleStageSearch())


def test_a_shell_carries_no_plaintext_and_opens_to_the_original(sealed: SealedVectorStore) -> None:
    node = _node()
    shell = sealed.seal_node(node)
    stored = json.dumps(node_to_metadata_dict(shell, remove_text=False))  # what a text-keeping store writes
    for secret in ("Jane", "Elm Street", SOURCE.hash, "moved to", node.node_id, "doc-1"):
        assert secret not in stored  # the node's and its source's ids too: the store holds their keyed ids
    node_sid, doc_sid = sealed.store_ids([node.node_id, "doc-1"])
    assert shell.node_id == node_sid and shell.ref_doc_id == doc_sid and shell.embedding == node.embedding
    assert shell.metadata["topic"] == "moves" and "author" not in shell.metadata  # plain fields stay filterable
    opened = sealed.open_node(shell, store_id=node_sid)
    assert opened.model_dump() == node.model_dump()  # text, metadata, relationships (with the source's metadata)
    assert node.metadata["author"] == "Jane Doe" and node.embedding == [1.0, 0.0, 0.0]  # input untouched


def test_node_types_survive(sealed: SealedVectorStore) -> None:
    index_node = IndexNode(text="see the other index", index_id="sub-index", embedding=[0.0, 1.0, 0.0])
    opened = sealed.open_node(sealed.seal_node(index_node))
    assert isinstance(opened, IndexNode) and opened.index_id == "sub-index"


def test_query_results_and_what_does_not_open() -> None:
    key = generate_key()
    inner = SimpleVectorStore()
    inner.stores_text = True  # as if it kept text: query results then carry nodes
    sealed = SealedVectorStore(inner, key=key, sealed_metadata=("author",), search=SingleStageSearch())
    node = _node()
    sealed.add([node])
    result = sealed.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=1))
    assert result.ids == sealed.store_ids([node.node_id]) and result.nodes is None  # ids only, as the store gave
    with pytest.raises(SealError):
        SealedVectorStore(inner, key=generate_key()).open_node(sealed.seal_node(node))
    with pytest.raises(SealError, match="moved"):
        sealed.open_node(sealed.seal_node(node), store_id="another-node")
    with pytest.raises(SealError):
        sealed.open_node(TextNode(text="plain text", id_="x"))  # an unsealed node never passes as opened
    with pytest.raises(ValueError, match="cannot filter on sealed"):
        sealed.query(
            VectorStoreQuery(
                query_embedding=[1.0, 0.0, 0.0],
                filters=MetadataFilters(filters=[MetadataFilter(key="author", value="Jane Doe")]),
            )
        )


def test_the_store_is_mirrored_and_the_key_never_shows() -> None:
    key = generate_key()
    sealed = SealedVectorStore(SimpleVectorStore(), key=key)
    assert sealed.stores_text is False and sealed.class_name() == "SealedVectorStore"
    assert key not in repr(sealed) and key not in str(sealed.to_dict())
    with pytest.raises(TypeError, match="BasePydanticVectorStore"):
        SealedVectorStore(object(), key=key)  # type: ignore[arg-type]


def test_kv_values_are_sealed_bound_and_persisted(tmp_path: Path) -> None:
    key = generate_key()
    raw = SimpleKVStore()
    kv = SealedKVStore(raw, key=key)
    kv.put("n1", {"text": "Jane Doe, 12 Elm Street"}, collection="docstore/data")
    kv.put_all([("n2", {"text": "Bob"}), ("n3", {"text": "Ann"})], collection="docstore/data")
    assert "Jane" not in json.dumps(raw.to_dict())
    assert kv.get("n1", collection="docstore/data") == {"text": "Jane Doe, 12 Elm Street"}
    assert kv.get("missing", collection="docstore/data") is None
    assert set(kv.get_all(collection="docstore/data")) == {"n1", "n2", "n3"}
    assert kv.delete("n3", collection="docstore/data") and kv.get("n3", collection="docstore/data") is None

    path = tmp_path / "docstore.json"
    kv.persist(str(path))
    assert "Jane" not in path.read_text()
    again = SealedKVStore.from_persist_path(str(path), key=key)
    assert again.get("n1", collection="docstore/data") == {"text": "Jane Doe, 12 Elm Street"}

    moved = raw.get("n1", collection="docstore/data")
    for target_key, collection in (("n2", "docstore/data"), ("n1", "docstore/ref_doc_info")):
        raw.put(target_key, moved, collection=collection)  # a value moved to another key or collection
        with pytest.raises(SealError):
            kv.get(target_key, collection=collection)
    raw.put("plain", {"text": "Jane"}, collection="docstore/data")
    with pytest.raises(SealError, match="not sealed"):
        kv.get("plain", collection="docstore/data")
    with pytest.raises(SealError):
        SealedKVStore(raw, key=generate_key()).get("n1", collection="docstore/data")
    with pytest.raises(TypeError, match="key="):
        SealedKVStore.from_persist_path(str(path))
    assert key not in repr(kv)


def test_kv_errors_never_name_the_node_or_document_id() -> None:
    """Docstores key values by the user's node and document ids: a value that does not open names neither."""
    key = generate_key()
    raw = SimpleKVStore()
    kv = SealedKVStore(raw, key=key)
    node_id, doc_id = "jane-doe-hiv-clinic-note-7", "jane-doe-medical-record.pdf"
    kv.put(node_id, {"text": "x"}, collection="docstore/data")
    kv.put(doc_id, {"node_ids": [node_id]}, collection="docstore/ref_doc_info")
    other = SealedKVStore(raw, key=generate_key())
    raw.put("elsewhere", raw.get(node_id, collection="docstore/data"), collection="docstore/data")
    raw.put(doc_id, {"text": "plain"}, collection="docstore/metadata")
    raw.put(node_id, {SEALED_VALUE: RecordSealer(key).seal_value([1], record_id=node_id, field="kv:x")}, collection="x")
    failing = [
        lambda: other.get(node_id, collection="docstore/data"),  # another key
        lambda: other.get(doc_id, collection="docstore/ref_doc_info"),
        lambda: other.get_all(collection="docstore/data"),
        lambda: asyncio.run(other.aget(doc_id, collection="docstore/ref_doc_info")),
        lambda: kv.get("elsewhere", collection="docstore/data"),  # moved to another id
        lambda: kv.get(doc_id, collection="docstore/metadata"),  # not sealed
        lambda: kv.get(node_id, collection="x"),  # not a dict
    ]
    for call in failing:
        with pytest.raises(SealError) as info:
            call()
        shown = "".join(traceback.format_exception(info.value))  # the chained errors too
        assert node_id not in shown and doc_id not in shown and "jane" not in shown.lower()


def test_kv_async() -> None:
    kv = SealedKVStore(key=generate_key())

    async def run() -> None:
        await kv.aput("a", {"v": 1})
        await kv.aput_all([("b", {"v": 2})])
        assert await kv.aget("a") == {"v": 1}
        assert await kv.aget_all() == {"a": {"v": 1}, "b": {"v": 2}}
        assert await kv.adelete("a") and await kv.aget("a") is None

    asyncio.run(run())
