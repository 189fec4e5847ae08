"""LangChain's SealedVectorStore against the sealed-store contract shared with the LlamaIndex adapter, in every mode.

The backing store is LangChain's ``InMemoryVectorStore`` (the fakes' ``RecordingStore``), logging every call it
receives; single-stage embeds with ``ProtectedEmbeddings`` (the store ranks the vectors of ``embedding``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore
from textcrafter_rag import GaussianNoise
from textcrafter_rag.testing import KnownVectors
from textcrafter_rag.testing.sealed_store_contract import Held, Hit, Request, SealedStoreContract

#: Single-stage opened over a store written with the plain base (the writer's embeddings travel with the store).
pytestmark = pytest.mark.filterwarnings("ignore::textcrafter_rag.sealed.core.UnprotectedVectorsWarning")


class LoggingStore(RecordingStore):
    """A ``RecordingStore`` that also logs the writes, reads by id and deletes it receives."""

    def __init__(self, embedding: Embeddings) -> None:
        super().__init__(embedding)
        self.log: list[Request] = []

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        self.log.append(Request("add", tuple(map(str, kwargs.get("ids") or ())), text=repr((documents, kwargs))))
        return super().add_documents(documents, **kwargs)

    def similarity_search_by_vector(self, embedding, k=4, **kwargs):  # type: ignore[no-untyped-def]
        self.log.append(Request("search", vector=tuple(embedding), text=repr(kwargs)))
        return super().similarity_search_by_vector(embedding, k=k, **kwargs)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        self.log.append(Request("get", tuple(map(str, ids))))
        return super().get_by_ids(ids)

    def delete(self, ids: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.log.append(Request("delete", tuple(map(str, ids or ())), text=repr(kwargs)))
        return super().delete(ids, **kwargs)


class Backing:
    """A backing store not built yet: the first sealed store builds it (with its embeddings), the others share it."""

    def __init__(self) -> None:
        self.store: LoggingStore | None = None


class TestSealedStoreContract(SealedStoreContract):
    def new_backing(self) -> Backing:
        return Backing()

    def open_store(self, backing: Backing, known: KnownVectors, *, key: bytes, tenant: str, search: Any) -> Any:
        base = FakeAsymmetricEmbeddings(known)
        embedding = base if search is not None else ProtectedEmbeddings(base=base, mechanism=GaussianNoise(s=0.05))
        options = {"key": key, "tenant": tenant, "sealed_metadata": self.SEALED_METADATA, "search": search}
        if backing.store is not None:  # another process over the same records, with the writer's embeddings
            return SealedVectorStore(backing.store, **options)
        sealed = SealedVectorStore(LoggingStore, embedding=embedding, **options)
        backing.store = sealed.store  # type: ignore[assignment]
        return sealed

    def add(
        self, store: Any, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], ids: Sequence[str]
    ) -> list[Any]:
        return store.add_texts(list(texts), [dict(m) for m in metadatas], ids=list(ids))

    def search(self, store: Any, query: str, k: int) -> list[Hit]:
        return [Hit(d.id, d.page_content, d.metadata) for d in store.similarity_search(query, k=k)]

    def get(self, store: Any, ids: Sequence[str]) -> list[Hit]:
        return [Hit(d.id, d.page_content, d.metadata) for d in store.get_by_ids(list(ids))]

    def delete(self, store: Any, ids: Sequence[str]) -> None:
        store.delete(list(ids))

    def held(self, backing: Backing) -> list[Held]:
        rows = backing.store.store.values() if backing.store is not None else []
        return [Held(str(r["id"]), r["text"], r["metadata"], r["vector"]) for r in rows]

    def received(self, backing: Backing) -> list[Request]:
        return list(backing.store.log) if backing.store is not None else []
