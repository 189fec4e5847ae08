"""ProtectedEmbedding against the adapter contract shared with the LangChain adapter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from llama_index.core.callbacks import CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload

from llama_index.embeddings.textcrafter import ProtectedEmbedding
from textcrafter_rag.testing import KnownVectors
from textcrafter_rag.testing.contract import ProtectedEmbeddingsContract

from ._llama_textcrafter_fakes import FakeBase, instrumented, vectors_in


class TestProtectedEmbeddingContract(ProtectedEmbeddingsContract):
    def make_embeddings(self, **options: Any) -> ProtectedEmbedding:
        # report_vectors: the contract's hook test checks that what hooks see is protected; that hooks see
        # no vectors at all by default is LlamaIndex-specific (test_llama_index_textcrafter.py)
        return ProtectedEmbedding(**{"report_vectors": True, **options})

    def make_base(self, known: KnownVectors) -> FakeBase:
        return FakeBase(known=known, model_name="fake")

    def embed_documents(self, embeddings: ProtectedEmbedding, texts: list[str]) -> list[list[float]]:
        return embeddings.get_text_embedding_batch(texts)

    async def aembed_documents(self, embeddings: ProtectedEmbedding, texts: list[str]) -> list[list[float]]:
        return await embeddings.aget_text_embedding_batch(texts)

    def embed_query(self, embeddings: ProtectedEmbedding, text: str) -> list[float]:
        return embeddings.get_query_embedding(text)

    async def aembed_query(self, embeddings: ProtectedEmbedding, text: str) -> list[float]:
        return await embeddings.aget_query_embedding(text)

    @contextmanager
    def observe_hooks(self, embeddings: ProtectedEmbedding) -> Iterator[list[Sequence[float]]]:
        """Instrumentation events, span results and the wrapper's callback payloads."""
        debug = LlamaDebugHandler()
        embeddings.callback_manager.add_handler(debug)
        seen: list[Sequence[float]] = []
        try:
            with instrumented() as (events, spans):
                yield seen
        finally:
            embeddings.callback_manager.remove_handler(debug)
        seen += events.vectors
        seen += vectors_in(spans.results)
        seen += [
            v for _, end in debug.get_event_pairs(CBEventType.EMBEDDING) for v in end.payload[EventPayload.EMBEDDINGS]
        ]
