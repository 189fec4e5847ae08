"""LlamaIndex ``BaseEmbedding`` that protects every document vector before it is stored.

Raw vectors never pass through LlamaIndex's instrumentation: the base model is called
only through its private ``_get_*`` methods (no ``EmbeddingEndEvent``, no callback
payload, no ``embeddings_cache`` entry), and with the ``dispatcher.span`` decorator that
LlamaIndex puts on every subclass's ``_get_text_embedding``/``_get_query_embedding``
peeled off, so span handlers never receive a raw vector as a span result either. This
wrapper's own methods report texts without vectors (:mod:`.instrumentation`): even protected
vectors paired with their texts help an observer (a keyed rotation falls to a few hundred such
pairs). ``report_vectors=True`` opts in to LlamaIndex's full events, protected vectors only.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from textcrafter_rag import Encoder, Protector
from textcrafter_rag.adapters import build_protector, per_text_encoder
from textcrafter_rag.encoders import llama_index_document_encoder, undecorated
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.options import ProtectionOptions

from .instrumentation import VectorFreeEmbedding, without_span

__all__ = ["BypassedCacheWarning", "ProtectedEmbedding", "span_free_encoders"]


class BypassedCacheWarning(UserWarning):
    """The base model's ``embeddings_cache`` is not used (it would hold raw vectors)."""


def span_free_encoders(base: BaseEmbedding) -> tuple[Encoder, Encoder]:
    """Document and query encoders calling a LlamaIndex model without spans, events, callbacks or cache.

    The document path is the core's (:func:`textcrafter_rag.encoders.llama_index_document_encoder`);
    the query path is the model's own one-text query methods, undecorated the same way.
    """
    name = getattr(base, "model_name", type(base).__name__)
    queries = per_text_encoder(
        undecorated(base, "_get_query_embedding"),
        undecorated(base, "_aget_query_embedding"),
        model_id=f"llama_index-query:{name}",
    )
    return llama_index_document_encoder(base), queries


def _paths(base: Any) -> tuple[Any, Encoder | None]:
    """A LlamaIndex base through its span-free private methods; any other base as it is."""
    return span_free_encoders(base) if isinstance(base, BaseEmbedding) else (base, None)


class ProtectedEmbedding(VectorFreeEmbedding):
    """Embed with any base model, then protect document vectors with a mechanism (default: TextCrafter).

    All protection is done by :class:`textcrafter_rag.Protector`, one mechanism call per batch, built by
    :func:`textcrafter_rag.adapters.build_protector` like the LangChain adapter's.

    Example:
        >>> from llama_index.embeddings.openai import OpenAIEmbedding
        >>> embed_model = ProtectedEmbedding(base=OpenAIEmbedding(), mechanism="path/to/policy")
        >>> index = VectorStoreIndex(nodes, embed_model=embed_model, storage_context=ctx)

    Args:
        base: The base model: a LlamaIndex ``BaseEmbedding``, a sentence-transformers model, a
            :class:`textcrafter_rag.Encoder` or a callable ``list[str] -> array``. ``None`` uses the
            bundled offline all-MiniLM-L6-v2.
        options: The protection options, the same object for the core and every adapter
            (:class:`textcrafter_rag.options.ProtectionOptions`).
        **kwargs: Any of those options by keyword -- ``mechanism`` (``"auto"``, the default, uses the
            TextCrafter policy shipped or cached for the encoder, or fits one on first use; or a spec
            string such as ``"gaussian:s=0.01"``, a policy directory or a mechanism), ``protect_queries``,
            ``secure_mode``, ``seed``, ``chunk_size``, ``key``, ``tenant`` (``policy=`` is the deprecated
            name of ``mechanism=``; only the protector holds the key) -- and ``BaseEmbedding`` fields
            (``embed_batch_size``, ``embeddings_cache`` -- refused with ``key``, since LlamaIndex keys it
            by text alone --, ...). For a LlamaIndex base, ``embed_batch_size``, ``num_workers`` and
            ``rate_limiter`` default to the base's.

    Pickling (``IngestionPipeline(num_workers=...)``, process pools) rebuilds the embedding from its
    constructor arguments in the other process -- never LlamaIndex's default, which drops what it
    cannot pickle and rebuilds a bundled-MiniLM copy. A key given by value refuses to be pickled
    (:class:`~textcrafter_rag.errors.NotPicklableError`); a key read with
    ``textcrafter_rag.sealing.load_key(PATH)`` or ``load_key(env=NAME)`` travels as that reference
    and each process reads it itself.

    Raises:
        textcrafter_rag.MissingPolicyError: No policy ships or is cached for the encoder and
            ``TEXTCRAFTER_AUTO_FIT=0`` forbids fitting one.
        textcrafter_rag.FingerprintMismatch: The policy was fitted for another encoder.
    """

    _base: Any = PrivateAttr()
    _protector: Protector = PrivateAttr()
    _init_args: dict[str, Any] = PrivateAttr()

    def __init__(self, *, base: Any = None, options: ProtectionOptions | None = None, **kwargs: Any) -> None:
        overrides, kwargs = ProtectionOptions.split(kwargs)
        options = ProtectionOptions.build(options, overrides)
        key = options.key
        init_args = dict(base=base, options=options, **kwargs)  # the key as a SecretKey: a reference, or refused
        if key is not None and kwargs.get("embeddings_cache") is not None:
            # LlamaIndex keys its cache by the text alone: one cache would hand one tenant's (or key's)
            # rotated vectors to another, and a document's protected vector to a query of the same text
            raise InvalidInputError("embeddings_cache cannot be used with key=: its entries are keyed by text only")
        built = build_protector(base, options=options, paths=_paths)
        if isinstance(built.base, BaseEmbedding):
            if built.base.embeddings_cache is not None:
                hint = (
                    ""
                    if key is not None
                    else "; set embeddings_cache on the ProtectedEmbedding to cache protected vectors"
                )
                warnings.warn(
                    f"the base model's embeddings_cache is bypassed so raw vectors are never cached{hint}",
                    BypassedCacheWarning,
                    stacklevel=2,
                )
            kwargs.setdefault("embed_batch_size", built.base.embed_batch_size)
            kwargs.setdefault("num_workers", built.base.num_workers)
            kwargs.setdefault("rate_limiter", built.base.rate_limiter)
        kwargs.setdefault("model_name", f"textcrafter:{built.protector.encoder.model_id}")
        super().__init__(**kwargs)
        self._base = built.base
        self._protector = built.protector
        self._init_args = init_args

    def __reduce__(self) -> Any:
        return (functools.partial(type(self), **self._init_args), ())

    @classmethod
    def class_name(cls) -> str:
        return "TextCrafterProtectedEmbedding"

    @property
    def protector(self) -> Protector:
        """The framework-free core doing the protection."""
        return self._protector

    @property
    def protect_queries(self) -> bool:
        """Whether query vectors are protected too."""
        return self._protector.protect_queries

    def to_payload(self) -> dict[str, Any]:
        """Non-sensitive description for instrumentation (no vectors, no mechanism parameters)."""
        payload = super().to_payload()
        payload.update(mechanism=self._protector.mechanism.name, protect_queries=self.protect_queries)
        return payload

    # Documents: always protected, one mechanism call per batch.
    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embedding(self, text: str) -> Embedding:
        return self._protector.embed_documents([text])[0].tolist()

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._protector.embed_documents(texts).tolist()

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._protector.aembed_documents([text]))[0].tolist()

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return (await self._protector.aembed_documents(texts)).tolist()

    # Queries: the base's query path; noised only if protect_queries, rotated whenever keyed.
    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._protector.embed_query(query).tolist()

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._protector.aembed_query(query)).tolist()
