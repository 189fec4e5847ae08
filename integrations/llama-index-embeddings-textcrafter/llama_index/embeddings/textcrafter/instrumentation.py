"""LlamaIndex instrumentation that carries texts but no vectors, unless the user opts in.

LlamaIndex reports every embedding call to observability handlers: ``EmbeddingEndEvent`` and the
callback manager's ``EMBEDDING`` payload pair each text with its vector, and the span around each
public method (and each subclass's ``_get_*`` implementation) hands its result, the vectors, to
every span handler. For a protected embedding those are (text, released vector) pairs: for a keyed
adapter, known pairs for the secret rotation (about as many as the dimension recover it); for
clean queries, the clean query vectors themselves. So :class:`VectorFreeEmbedding` reimplements
the public methods with the same events and callbacks minus the vectors (``embeddings=[]``, no
``EventPayload.EMBEDDINGS``) and without spans around them; ``report_vectors=True`` restores
LlamaIndex's own methods, vectors and spans included.

What it cannot reach: spans of the caller's own components (an ``IngestionPipeline`` run returns
nodes that hold their embeddings), and handlers that read nodes after embedding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from llama_index.core.async_utils import run_jobs
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation import DISPATCHER_SPAN_DECORATED_ATTR, get_dispatcher
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent, EmbeddingStartEvent
from llama_index.core.schema import BaseNode, MetadataMode

__all__ = ["VectorFreeEmbedding", "without_span"]

dispatcher = get_dispatcher(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])
_CACHE = "embeddings"  # LlamaIndex's collection name in embeddings_cache


def without_span(fn: _F) -> _F:
    """Keep LlamaIndex's ``DispatcherSpanMixin`` from wrapping ``fn`` in a span (whose exit carries its result).

    The mixin wraps overrides of span-decorated or abstract methods; ``dispatcher.span`` is
    idempotent and skips a function already marked as decorated, so marking it opts it out.
    """
    setattr(fn, DISPATCHER_SPAN_DECORATED_ATTR, True)
    return fn


class VectorFreeEmbedding(BaseEmbedding):
    """A ``BaseEmbedding`` whose events, callbacks and spans carry no vectors unless ``report_vectors``."""

    report_vectors: bool = Field(
        default=False,
        description=(
            "Put the vectors in LlamaIndex's embedding events, callback payloads and span results. Off: "
            "handlers see the texts only, never (text, vector) pairs, which reveal a keyed rotation."
        ),
    )

    def _report(self, texts: list[str], embed: Callable[[], list[Embedding]]) -> list[Embedding]:
        model_dict = self.to_payload()
        dispatcher.event(EmbeddingStartEvent(model_dict=model_dict))
        with self.callback_manager.event(CBEventType.EMBEDDING, payload={EventPayload.SERIALIZED: model_dict}) as ev:
            if self.rate_limiter is not None:
                self.rate_limiter.acquire()
            vectors = embed()
            ev.on_end(payload={EventPayload.CHUNKS: texts})
        dispatcher.event(EmbeddingEndEvent(chunks=texts, embeddings=[]))
        return vectors

    async def _areport(self, texts: list[str], embed: Callable[[], Awaitable[list[Embedding]]]) -> list[Embedding]:
        model_dict = self.to_payload()
        dispatcher.event(EmbeddingStartEvent(model_dict=model_dict))
        event_id = self.callback_manager.on_event_start(
            CBEventType.EMBEDDING, payload={EventPayload.SERIALIZED: model_dict}
        )
        if self.rate_limiter is not None:
            await self.rate_limiter.async_acquire()
        vectors = await embed()
        dispatcher.event(EmbeddingEndEvent(chunks=texts, embeddings=[]))
        self.callback_manager.on_event_end(
            CBEventType.EMBEDDING, payload={EventPayload.CHUNKS: texts}, event_id=event_id
        )
        return vectors

    def _texts(self, texts: list[str]) -> list[Embedding]:
        return (
            self._get_text_embeddings(texts)
            if self.embeddings_cache is None
            else self._get_text_embeddings_cached(texts)
        )

    async def _atexts(self, texts: list[str]) -> list[Embedding]:
        if self.embeddings_cache is None:
            return await self._aget_text_embeddings(texts)
        return await self._aget_text_embeddings_cached(texts)

    def _query(self, query: str) -> list[Embedding]:
        """The query's vector, through ``embeddings_cache`` as LlamaIndex's own method does."""
        if self.embeddings_cache is None:
            return [self._get_query_embedding(query)]
        hit = self.embeddings_cache.get(key=query, collection=_CACHE)
        if hit is not None:
            return [next(iter(hit.values()))]
        vector = self._get_query_embedding(query)
        self.embeddings_cache.put(key=query, val={str(uuid.uuid4()): vector}, collection=_CACHE)
        return [vector]

    async def _aquery(self, query: str) -> list[Embedding]:
        if self.embeddings_cache is None:
            return [await self._aget_query_embedding(query)]
        hit = await self.embeddings_cache.aget(key=query, collection=_CACHE)
        if hit is not None:
            return [next(iter(hit.values()))]
        vector = await self._aget_query_embedding(query)
        await self.embeddings_cache.aput(key=query, val={str(uuid.uuid4()): vector}, collection=_CACHE)
        return [vector]

    def _batches(self, texts: Sequence[str]) -> list[list[str]]:
        size = max(1, int(self.embed_batch_size))
        return [list(texts[i : i + size]) for i in range(0, len(texts), size)]

    @without_span
    def get_query_embedding(self, query: str) -> Embedding:
        if self.report_vectors:
            return super().get_query_embedding(query)
        return self._report([query], lambda: self._query(query))[0]

    @without_span
    async def aget_query_embedding(self, query: str) -> Embedding:
        if self.report_vectors:
            return await super().aget_query_embedding(query)
        return (await self._areport([query], lambda: self._aquery(query)))[0]

    @without_span
    def get_text_embedding(self, text: str) -> Embedding:
        if self.report_vectors:
            return super().get_text_embedding(text)
        return self._report([text], lambda: self._texts([text]))[0]

    @without_span
    async def aget_text_embedding(self, text: str) -> Embedding:
        if self.report_vectors:
            return await super().aget_text_embedding(text)
        return (await self._areport([text], lambda: self._atexts([text])))[0]

    @without_span
    def get_text_embedding_batch(self, texts: list[str], show_progress: bool = False, **kwargs: Any) -> list[Embedding]:
        if self.report_vectors:
            return super().get_text_embedding_batch(texts, show_progress=show_progress, **kwargs)
        return [v for batch in self._batches(texts) for v in self._report(batch, lambda b=batch: self._texts(b))]

    @without_span
    async def aget_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[Embedding]:
        if self.report_vectors:
            return await super().aget_text_embedding_batch(texts, show_progress=show_progress, **kwargs)
        jobs = [self._areport(batch, lambda b=batch: self._atexts(b)) for batch in self._batches(texts)]
        if self.num_workers and self.num_workers > 1:
            results = await run_jobs(jobs, show_progress=show_progress, workers=self.num_workers)
        else:
            results = await asyncio.gather(*jobs)
        return [v for vectors in results for v in vectors]

    @without_span
    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        if self.report_vectors:
            return super().__call__(nodes, **kwargs)
        texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in nodes]
        for node, vector in zip(nodes, self.get_text_embedding_batch(texts, **kwargs)):
            node.embedding = vector
        return nodes
