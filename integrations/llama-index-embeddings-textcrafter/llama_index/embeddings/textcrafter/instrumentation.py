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

:data:`SILENT_VECTORS` remembers (as keyed digests) the clean vectors ``SealedEmbedding`` released, so a store that
must receive vectors no handler saw -- the clean vectors of two-stage search -- can tell a plain
LlamaIndex model's vectors, which were reported beside their texts, from those (:func:`warn_unless_silent`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
from llama_index.core.async_utils import run_jobs
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation import DISPATCHER_SPAN_DECORATED_ATTR, get_dispatcher
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent, EmbeddingStartEvent
from llama_index.core.schema import BaseNode, MetadataMode

__all__ = [
    "PROTECTED_VECTORS",
    "SILENT_VECTORS",
    "ReportedVectorsWarning",
    "SilentVectors",
    "VectorFreeEmbedding",
    "warn_unless_silent",
    "without_span",
]

dispatcher = get_dispatcher(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])
_CACHE = "embeddings"  # LlamaIndex's collection name in embeddings_cache


class ReportedVectorsWarning(UserWarning):
    """Vectors reached a store that must get only unreported ones, from no ``SealedEmbedding`` of this process.

    A plain LlamaIndex embedding model hands every vector it makes, beside its text, to every
    instrumentation event handler, callback handler and span handler (tracing integrations ship them
    to third parties). Turn it into an error with ``warnings.simplefilter("error", ReportedVectorsWarning)``.
    """


class SilentVectors:
    """Keyed digests of the last ``capacity`` clean vectors that ``SealedEmbedding`` models released unreported.

    A digest is a process-secret keyed BLAKE2b of the vector's float64 bytes, 8 bytes as an int: it
    tells whether a vector was released unreported and reveals nothing about it. The oldest digests
    are dropped first, so only vectors that reach the store long after they were made (more than
    ``capacity`` vectors later, or made in another process) are not recognised.

    Args:
        capacity: How many digests to keep (about 70 bytes each).
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._key = os.urandom(16)
        self._capacity = capacity
        self._order: deque[int] = deque()
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def _digest(self, vector: Any) -> int:
        data = np.asarray(vector, dtype=np.float64).tobytes()
        return int.from_bytes(hashlib.blake2b(data, key=self._key, digest_size=8).digest(), "little")

    def add(self, vectors: Iterable[Any]) -> None:
        """Remember ``vectors`` as released by a model that reports no vectors unless told to."""
        digests = [self._digest(v) for v in vectors]
        with self._lock:
            for d in digests:
                if d in self._seen:
                    continue
                self._seen.add(d)
                self._order.append(d)
                if len(self._order) > self._capacity:
                    self._seen.discard(self._order.popleft())

    def unknown(self, vectors: Iterable[Any]) -> int:
        """How many of ``vectors`` were not released by such a model (recently, in this process)."""
        digests = [self._digest(v) for v in vectors]
        with self._lock:
            return sum(d not in self._seen for d in digests)


#: The clean vectors that ``SealedEmbedding`` models of this process released (see :class:`SilentVectors`).
SILENT_VECTORS = SilentVectors()
#: The protected document vectors that ``ProtectedEmbedding`` models of this process released (the same keyed
#: digests): a single-stage store warns when it is handed vectors none of them made.
PROTECTED_VECTORS = SilentVectors()


def warn_unless_silent(vectors: Sequence[Any], *, what: str, stacklevel: int = 2) -> int:
    """Warn (:class:`ReportedVectorsWarning`) if some of ``vectors`` came from no ``SealedEmbedding``.

    For stores that must get only vectors no handler saw (two-stage search's clean vectors): it
    cannot stop a plain model's report, which happened before the store is called, but makes it
    loud instead of silent. Vectors made by the caller's own code, or in another process, are not
    recognised either; the warning says so.

    Args:
        vectors: The vectors the store received.
        what: What they are, for the message (e.g. ``"node embeddings"``); never a value.
        stacklevel: As for :func:`warnings.warn`, counted from the caller.

    Returns:
        How many were not recognised.
    """
    unknown = SILENT_VECTORS.unknown(vectors)
    if unknown:
        warnings.warn(
            f"{unknown} of {len(vectors)} {what} came from no SealedEmbedding of this process: a plain "
            "LlamaIndex embedding model reports every vector beside its text to every instrumentation, "
            "callback and span handler; wrap it: embed_model=SealedEmbedding(base=...) "
            "(vectors your own code made are not recognised: filter ReportedVectorsWarning then)",
            ReportedVectorsWarning,
            stacklevel=stacklevel + 1,
        )
    return unknown


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
