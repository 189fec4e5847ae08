"""LlamaIndex's SealedVectorStore against the sealed-store contract shared with the LangChain adapter, in every mode.

The backing store is a ``QdrantVectorStore`` over an in-memory Qdrant client, logging every call it receives.
Sealed modes embed with ``SealedEmbedding`` (clean vectors, reported to no handler), single-stage with
``ProtectedEmbedding`` (the store ranks the nodes' own embeddings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores import VectorStoreQuery

from llama_index.embeddings.textcrafter import ProtectedEmbedding, SealedEmbedding, SealedVectorStore
from textcrafter_rag import GaussianNoise
from textcrafter_rag.testing import KnownVectors
from textcrafter_rag.testing.sealed_store_contract import Held, Hit, Request, SealedStoreContract

from ._llama_textcrafter_fakes import FakeBase

QdrantVectorStore = pytest.importorskip("llama_index.vector_stores.qdrant").QdrantVectorStore
from qdrant_client import QdrantClient

COLLECTION = "contract"


class LoggingQdrant(QdrantVectorStore):  # type: ignore[misc,valid-type]
    """A ``QdrantVectorStore`` that logs the writes, searches, reads by id and deletes it receives."""

    _log: list[Request] = PrivateAttr(default_factory=list)

    def __init__(self, log: list[Request], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._log = log

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        self._log.append(Request("add", tuple(n.node_id for n in nodes), text=repr((list(nodes), kwargs))))
        return super().add(nodes, **kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> Any:
        vector = tuple(query.query_embedding) if query.query_embedding is not None else None
        self._log.append(Request("search", vector=vector, text=repr((query, kwargs))))
        return super().query(query, **kwargs)

    def get_nodes(self, node_ids: list[str] | None = None, filters: Any = None, **kwargs: Any) -> list[BaseNode]:
        self._log.append(Request("get", tuple(map(str, node_ids or ())), text=repr((filters, kwargs))))
        return super().get_nodes(node_ids, filters, **kwargs)

    def delete_nodes(self, node_ids: list[str] | None = None, filters: Any = None, **kwargs: Any) -> None:
        self._log.append(Request("delete", tuple(map(str, node_ids or ())), text=repr((filters, kwargs))))
        return super().delete_nodes(node_ids, filters, **kwargs)

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        self._log.append(Request("delete", (str(ref_doc_id),), text=repr(kwargs)))
        return super().delete(ref_doc_id, **kwargs)


@dataclass
class Backing:
    """One in-memory Qdrant collection, and the log of every call any store object over it received."""

    client: QdrantClient = field(default_factory=lambda: QdrantClient(":memory:"))
    log: list[Request] = field(default_factory=list)


@dataclass
class Opened:
    """A sealed store and the model its nodes and queries are embedded with."""

    store: SealedVectorStore
    model: Any


class TestSealedStoreContract(SealedStoreContract):
    def new_backing(self) -> Backing:
        return Backing()

    def open_store(self, backing: Backing, known: KnownVectors, *, key: bytes, tenant: str, search: Any) -> Opened:
        base = FakeBase(known=known, model_name="fake")
        model = (
            SealedEmbedding(base=base)
            if search is not None
            else ProtectedEmbedding(base=base, mechanism=GaussianNoise(s=0.05))
        )
        inner = LoggingQdrant(backing.log, client=backing.client, collection_name=COLLECTION)
        sealed = SealedVectorStore(inner, key=key, tenant=tenant, sealed_metadata=self.SEALED_METADATA, search=search)
        return Opened(sealed, model)

    def add(
        self, store: Opened, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], ids: Sequence[str]
    ) -> list[Any]:
        vectors = store.model.get_text_embedding_batch(list(texts))
        nodes = [
            TextNode(id_=i, text=t, metadata=dict(m), embedding=v)
            for t, m, i, v in zip(texts, metadatas, ids, vectors, strict=True)
        ]
        return store.store.add(nodes)

    def search(self, store: Opened, query: str, k: int) -> list[Hit]:
        vector = store.model.get_query_embedding(query)
        result = store.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=k))
        return [Hit(n.node_id, n.get_content(), n.metadata) for n in result.nodes or []]

    def get(self, store: Opened, ids: Sequence[str]) -> list[Hit]:
        return [Hit(n.node_id, n.get_content(), n.metadata) for n in store.store.get_nodes(node_ids=list(ids))]

    def delete(self, store: Opened, ids: Sequence[str]) -> None:
        store.store.delete_nodes(list(ids))

    def store_ids(self, store: Opened, ids: Sequence[str]) -> list[str]:
        return [str(i) for i in store.store.store_ids(list(ids))]

    def held(self, backing: Backing) -> list[Held]:
        if not backing.client.collection_exists(COLLECTION):
            return []
        points = backing.client.scroll(COLLECTION, limit=10_000, with_payload=True, with_vectors=True)[0]
        out = []
        for p in points:
            payload = dict(p.payload or {})
            text = json.loads(payload.get("_node_content", "{}")).get("text", "")
            vector = next(iter(p.vector.values())) if isinstance(p.vector, dict) else p.vector
            out.append(Held(str(p.id), text, payload, vector))
        return out

    def received(self, backing: Backing) -> list[Request]:
        return list(backing.log)
