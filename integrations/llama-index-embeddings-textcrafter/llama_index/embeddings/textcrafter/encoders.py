"""A LlamaIndex model as a :class:`textcrafter_rag.Encoder`, with no instrumentation on the way.

LlamaIndex's knowledge lives here, not in the core: the core recognizes encoders by a small protocol
(:func:`textcrafter_rag.encoders.as_encoder`) and refuses a LlamaIndex model, whose public methods hand
every raw vector to LlamaIndex's events, callbacks and span handlers. :func:`document_encoder` calls only
the model's private ``_get_*`` methods instead (no ``EmbeddingEndEvent``, callback payload or
``embeddings_cache`` entry), with the span decorators LlamaIndex wraps around them peeled off
(:func:`undecorated`), so no span handler receives a vector as a span's result either.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from types import FunctionType
from typing import Any

from llama_index.core.instrumentation import DISPATCHER_SPAN_DECORATED_ATTR as SPAN_MARKER

from textcrafter_rag import Encoder

__all__ = ["BATCH_METHOD", "document_encoder", "undecorated"]

#: The public batch method of a LlamaIndex ``BaseEmbedding``: the class that defines it is the framework's base.
BATCH_METHOD = "get_text_embedding_batch"


def undecorated(obj: Any, name: str) -> Callable[..., Any]:
    """``obj.<name>`` bound, without the instrumentation span decorators wrapped around it.

    A span decorator is a proxy object (its type is not a plain function's) carrying LlamaIndex's span
    marker; a plain function the model's author decorated themselves (``functools.wraps``, e.g. a retry) is
    kept as it is.
    """
    fn = inspect.getattr_static(type(obj), name)
    while type(fn) is not FunctionType and getattr(fn, SPAN_MARKER, False) and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn.__get__(obj, type(obj)) if hasattr(fn, "__get__") else getattr(obj, name)


def _framework_default(obj: Any, name: str) -> bool:
    """Whether ``obj.<name>`` is the framework's own default: defined by the class defining the batch API."""
    owner = next((cls for cls in type(obj).__mro__ if name in vars(cls)), None)
    return owner is not None and BATCH_METHOD in vars(owner)


def document_encoder(base: Any) -> Encoder:
    """The document :class:`~textcrafter_rag.Encoder` of a LlamaIndex ``BaseEmbedding``, without instrumentation.

    Only the model's private methods are called, without their span decorators. The framework's default
    batch methods loop over the span-decorated one-text methods, so for those the same loop runs over
    undecorated ones.
    """
    if _framework_default(base, "_get_text_embeddings"):
        one = undecorated(base, "_get_text_embedding")

        def docs(texts: list[str]) -> list[Any]:
            return [one(t) for t in texts]
    else:
        docs = undecorated(base, "_get_text_embeddings")

    adocs: Callable[[list[str]], Any] | None
    if hasattr(base, "_aget_text_embeddings") and not _framework_default(base, "_aget_text_embeddings"):
        adocs = undecorated(base, "_aget_text_embeddings")
    elif hasattr(base, "_aget_text_embedding") and not _framework_default(base, "_aget_text_embedding"):
        aone = undecorated(base, "_aget_text_embedding")

        async def adocs(texts: list[str]) -> list[Any]:
            return list(await asyncio.gather(*(aone(t) for t in texts)))
    else:
        adocs = None  # no native async: the sync path runs in a worker thread
    return Encoder(docs, async_fn=adocs, model_id=f"llama_index:{getattr(base, 'model_name', type(base).__name__)}")
