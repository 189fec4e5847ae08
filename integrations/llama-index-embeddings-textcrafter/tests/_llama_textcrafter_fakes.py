"""Fakes for the llama-index-embeddings-textcrafter tests (a uniquely named module of this tests package)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent
from llama_index.core.instrumentation.span_handlers import NullSpanHandler

from textcrafter_rag.sealed.candidates import pack_vector, unpack_vector
from textcrafter_rag.testing import KnownVectors

#: Two dozen near-identical notes, and UUID ids (Qdrant's point ids), for the sealed-search tests.
NOTES = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(24)]
NOTE_IDS = [f"00000000-0000-4000-8000-{i:012d}" for i in range(24)]


class FakeBase(BaseEmbedding):
    """A LlamaIndex base serving :class:`KnownVectors` (queries differ from documents); counts private calls."""

    _known: KnownVectors = PrivateAttr(default_factory=KnownVectors)
    _calls: dict[str, int] = PrivateAttr(default_factory=dict)

    def __init__(self, *, known: KnownVectors | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if known is not None:
            self._known = known

    def doc(self, text: str) -> list[float]:
        return self._known.document_vector(text)

    def query(self, text: str) -> list[float]:
        return self._known.query_vector(text)

    def _count(self, name: str) -> None:
        self._calls[name] = self._calls.get(name, 0) + 1

    @property
    def calls(self) -> dict[str, int]:
        return self._calls

    def _get_query_embedding(self, query: str) -> list[float]:
        self._count("_get_query_embedding")
        return self._known.serve_query(query, path="embed_query")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._count("_aget_query_embedding")
        return self._known.serve_query(query, path="aembed_query")

    def _get_text_embedding(self, text: str) -> list[float]:
        self._count("_get_text_embedding")
        return self._known.serve_documents([text], path="embed_documents")[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._count("_get_text_embeddings")
        return self._known.serve_documents(texts, path="embed_documents")

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._count("_aget_text_embeddings")
        return self._known.serve_documents(texts, path="aembed_documents")


class MinimalBase(BaseEmbedding):
    """Implements only the abstract methods: LlamaIndex span-decorates all three, and its default
    batch methods loop over them."""

    _known: KnownVectors = PrivateAttr(default_factory=KnownVectors)

    def doc(self, text: str) -> list[float]:
        return self._known.document_vector(text)

    def query(self, text: str) -> list[float]:
        return self._known.query_vector(text)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.doc(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.query(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self.query(query)


class EmbeddingEventRecorder(BaseEventHandler):
    """Records the vectors and the texts of every EmbeddingEndEvent."""

    vectors: list[list[float]] = Field(default_factory=list)
    chunks: list[str] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "EmbeddingEventRecorder"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, EmbeddingEndEvent):
            self.vectors.extend(event.embeddings)
            self.chunks.extend(event.chunks)


class SpanResultRecorder(NullSpanHandler):
    """Records every span's result (e.g. what get_text_embedding_batch returned)."""

    _results: list[Any] = PrivateAttr(default_factory=list)

    @property
    def results(self) -> list[Any]:
        return self._results

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        self._results.append(result)


@contextmanager
def instrumented() -> Iterator[tuple[EmbeddingEventRecorder, SpanResultRecorder]]:
    """Event and span handlers on the root dispatcher, removed afterwards."""
    root = get_dispatcher()
    events, spans = EmbeddingEventRecorder(), SpanResultRecorder()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        yield events, spans
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not events]
        root.span_handlers = [h for h in root.span_handlers if h is not spans]


def vectors_in(obj: Any, dim: int = 8) -> list[np.ndarray]:
    """Every float vector of length ``dim`` nested anywhere in lists/tuples/dicts."""
    if isinstance(obj, (list, tuple)):
        if len(obj) == dim and all(isinstance(v, float) for v in obj):
            return [np.asarray(obj, dtype=np.float32)]
        return [v for item in obj for v in vectors_in(item, dim)]
    if isinstance(obj, dict):
        return [v for item in obj.values() for v in vectors_in(item, dim)]
    return []


def cosine(a: Any, b: Any) -> float:
    """The cosine of two vectors, in float64."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def exact_top(base: FakeBase, query: str, k: int) -> list[str]:
    """The ``k`` notes of highest cosine with the query, ranked by their sealed (int8) clean vectors as a store is."""
    q = base.query(query)
    return [NOTES[i] for i in np.argsort([cosine(q, unpack_vector(pack_vector(base.doc(t)))) for t in NOTES])[::-1][:k]]
