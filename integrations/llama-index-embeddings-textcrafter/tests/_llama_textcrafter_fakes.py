"""Fakes for the llama-index-embeddings-textcrafter tests (a uniquely named module, so no clash elsewhere)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent
from llama_index.core.instrumentation.span_handlers import NullSpanHandler



def known_vector(text: str, dim: int = 8) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return (v / np.linalg.norm(v)).tolist()


class FakeBase(BaseEmbedding):
    """A LlamaIndex base returning known vectors (queries differ from documents); counts private calls."""

    _calls: dict[str, int] = PrivateAttr(default_factory=dict)

    def doc(self, text: str) -> list[float]:
        return known_vector("doc:" + text)

    def query(self, text: str) -> list[float]:
        return known_vector("query:" + text)

    def _count(self, name: str) -> None:
        self._calls[name] = self._calls.get(name, 0) + 1

    @property
    def calls(self) -> dict[str, int]:
        return self._calls

    def _get_query_embedding(self, query: str) -> list[float]:
        self._count("_get_query_embedding")
        return self.query(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._count("_aget_query_embedding")
        return self.query(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self._count("_get_text_embedding")
        return self.doc(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._count("_get_text_embeddings")
        return [self.doc(t) for t in texts]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._count("_aget_text_embeddings")
        return [self.doc(t) for t in texts]


class EmbeddingEventRecorder(BaseEventHandler):
    """Records the vectors of every EmbeddingEndEvent."""

    vectors: list[list[float]] = []

    @classmethod
    def class_name(cls) -> str:
        return "EmbeddingEventRecorder"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, EmbeddingEndEvent):
            self.vectors.extend(event.embeddings)


class SpanResultRecorder(NullSpanHandler):
    """Records every span's result (e.g. what get_text_embedding_batch returned)."""

    _results: list[Any] = PrivateAttr(default_factory=list)

    @property
    def results(self) -> list[Any]:
        return self._results

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        self._results.append(result)
