"""Fakes for the langchain-textcrafter tests (a uniquely named module: test folders share sys.path)."""

from __future__ import annotations

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from textcrafter_rag.sealed.candidates import pack_vector, unpack_vector
from textcrafter_rag.testing import KnownVectors


class FakeAsymmetricEmbeddings(Embeddings):
    """A LangChain base serving :class:`KnownVectors`: query vectors differ from document vectors."""

    def __init__(self, known: KnownVectors | None = None) -> None:
        self.known = known or KnownVectors()

    def doc(self, text: str) -> list[float]:
        return self.known.document_vector(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.known.serve_documents(texts, path="embed_documents")

    def embed_query(self, text: str) -> list[float]:
        return self.known.serve_query(text, path="embed_query")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.known.serve_documents(texts, path="aembed_documents")

    async def aembed_query(self, text: str) -> list[float]:
        return self.known.serve_query(text, path="aembed_query")


class RecordingStore(InMemoryVectorStore):
    """An in-memory store that records every vector it is searched with."""

    def __init__(self, embedding: Embeddings) -> None:
        super().__init__(embedding)
        self.searched: list[list[float]] = []

    def similarity_search_by_vector(self, embedding, k=4, **kwargs):  # type: ignore[no-untyped-def]
        self.searched.append(list(embedding))
        return super().similarity_search_by_vector(embedding, k=k, **kwargs)

    async def asimilarity_search_by_vector(self, embedding, k=4, **kwargs):  # type: ignore[no-untyped-def]
        self.searched.append(list(embedding))
        return await super().asimilarity_search_by_vector(embedding, k=k, **kwargs)


class ReadsRecorded(RecordingStore):
    """A :class:`RecordingStore` that also records the ids of every read by id, sync and async."""

    def __init__(self, embedding: Embeddings) -> None:
        super().__init__(embedding)
        self.reads: list[list[str]] = []

    def get_by_ids(self, ids):  # type: ignore[no-untyped-def]
        self.reads.append([str(i) for i in ids])
        return super().get_by_ids(ids)

    async def aget_by_ids(self, ids):  # type: ignore[no-untyped-def]
        self.reads.append([str(i) for i in ids])
        return super().get_by_ids(ids)


def cosine(a: object, b: object) -> float:
    """The cosine of two vectors, in float64."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def exact_top(base: FakeAsymmetricEmbeddings, texts: list[str], query: str, k: int) -> list[str]:
    """The ``k`` texts of highest cosine with the query, ranked by their sealed (int8) clean vectors as a store is."""
    q = base.known.query_vector(query)
    scores = [cosine(q, unpack_vector(pack_vector(np.asarray(base.doc(t))))) for t in texts]
    return [texts[i] for i in np.argsort(scores)[::-1][:k]]
