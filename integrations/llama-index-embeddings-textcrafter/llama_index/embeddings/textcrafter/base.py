"""LlamaIndex ``BaseEmbedding`` that protects every document vector before it is stored.

Raw vectors never pass through LlamaIndex's instrumentation: the base model is called
only through its private ``_get_*`` methods (no ``EmbeddingEndEvent``, no callback
payload, no ``embeddings_cache`` entry), and with the ``dispatcher.span`` decorator that
LlamaIndex puts on every subclass's ``_get_text_embedding``/``_get_query_embedding``
peeled off, so span handlers never receive a raw vector as a span result either. This
wrapper's own methods report texts without vectors (:mod:`.instrumentation`): even protected
vectors paired with their texts help an observer (a keyed rotation falls to a few hundred such
pairs). ``report_vectors=True`` opts in to LlamaIndex's full events, protected vectors only.

:class:`SealedEmbedding` is the same wrapper without protection, for sealed search, whose store must receive
the clean vectors and is the only place they may go (a sealed store given a ``ProtectedEmbedding`` as
``embed_model=`` reads it through this wrapper: :meth:`ProtectedEmbedding.sealed`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from textcrafter_rag import Encoder, Protector
from textcrafter_rag.adapters import build_protector, per_text_encoder
from textcrafter_rag.encoders import as_encoder, bundled_minilm
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.options import ProtectionOptions

from .encoders import document_encoder, undecorated
from .instrumentation import PROTECTED_VECTORS, SILENT_VECTORS, VectorFreeEmbedding, without_span

__all__ = ["BypassedCacheWarning", "ProtectedEmbedding", "SealedEmbedding", "span_free_encoders"]


class BypassedCacheWarning(UserWarning):
    """The base model's ``embeddings_cache`` is not used (it would hold raw vectors)."""


def span_free_encoders(base: BaseEmbedding) -> tuple[Encoder, Encoder]:
    """Document and query encoders calling a LlamaIndex model without spans, events, callbacks or cache.

    The document path is :func:`.encoders.document_encoder`;
    the query path is the model's own one-text query methods, undecorated the same way.
    """
    name = getattr(base, "model_name", type(base).__name__)
    queries = per_text_encoder(
        undecorated(base, "_get_query_embedding"),
        undecorated(base, "_aget_query_embedding"),
        model_id=f"llama_index-query:{name}",
    )
    return document_encoder(base), queries


def _paths(base: Any) -> tuple[Any, Encoder | None]:
    """A LlamaIndex base through its span-free private methods; any other base as it is."""
    return span_free_encoders(base) if isinstance(base, BaseEmbedding) else (base, None)


def _inherit(base: Any, kwargs: dict[str, Any], *, cache_hint: str) -> None:
    """Take a LlamaIndex base's batch size, workers and rate limiter; warn that its cache is bypassed.

    The base is only ever called through its private methods, so its ``embeddings_cache`` would
    never be used -- and must not be: it would hold vectors that no wrapper chose to store.
    """
    if not isinstance(base, BaseEmbedding):
        return
    if base.embeddings_cache is not None:
        warnings.warn(
            f"the base model's embeddings_cache is bypassed so raw vectors are never cached{cache_hint}",
            BypassedCacheWarning,
            stacklevel=3,
        )
    kwargs.setdefault("embed_batch_size", base.embed_batch_size)
    kwargs.setdefault("num_workers", base.num_workers)
    kwargs.setdefault("rate_limiter", base.rate_limiter)


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
        hint = "" if key is not None else "; set embeddings_cache on the ProtectedEmbedding to cache protected vectors"
        _inherit(built.base, kwargs, cache_hint=hint)
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

    def sealed(self) -> SealedEmbedding:
        """The same base model, clean and reported to no handler: what a sealed store reads this model through.

        A sealed store given this model (``embed_model=``) in a sealed-search mode uses it, as the LangChain
        adapter reads a ``ProtectedEmbeddings`` through its base: the store protects what it sends.
        """
        return SealedEmbedding(base=self._base)

    def to_payload(self) -> dict[str, Any]:
        """Non-sensitive description for instrumentation (no vectors, no mechanism parameters)."""
        payload = super().to_payload()
        payload.update(mechanism=self._protector.mechanism.name, protect_queries=self.protect_queries)
        return payload

    # Documents: always protected, one mechanism call per batch.
    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embedding(self, text: str) -> Embedding:
        return _released(self._protector.embed_documents([text]).tolist())[0]

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _released(self._protector.embed_documents(texts).tolist())

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embedding(self, text: str) -> Embedding:
        return _released((await self._protector.aembed_documents([text])).tolist())[0]

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _released((await self._protector.aembed_documents(texts)).tolist())

    # Queries: the base's query path; noised only if protect_queries, rotated whenever keyed.
    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._protector.embed_query(query).tolist()

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._protector.aembed_query(query)).tolist()


def _released(vectors: list[Embedding]) -> list[Embedding]:
    """Protected document vectors, remembered (keyed digests) so a single-stage store can tell them from clean ones."""
    PROTECTED_VECTORS.add(vectors)
    return vectors


class SealedEmbedding(VectorFreeEmbedding):
    """The plain encoder for sealed search: clean vectors, reported to no handler.

    Sealed search (``sealed_storage_context(..., search=...)`` or :class:`SealedVectorStore` with
    ``search=`` a ``StoreIndexSearch``, ``TwoStageSearch`` or ``AppIndexSearch``) needs the clean vectors:
    the store seals each one and sends the backend only a keyed random vector or a heavily protected
    candidate. Embed with this model, or give the store a ``ProtectedEmbedding`` as ``embed_model=``,
    which it reads through this wrapper of its base (embedding each node a second time). But a plain LlamaIndex model
    hands every vector it makes, beside its text, to every instrumentation event handler
    (``EmbeddingEndEvent``), callback handler (``EventPayload.EMBEDDINGS``) and span handler (the
    span results of ``get_*_embedding*``) -- the clean document and query vectors that the sealed
    store exists to keep, shipped by tracing integrations to third parties. This wrapper returns the
    same vectors, calls the base only through its span-free private methods, and reports texts
    without vectors (:class:`~.instrumentation.VectorFreeEmbedding`); ``report_vectors=True`` opts
    in to LlamaIndex's full events, clean vectors included.

    It protects nothing itself (the sealed store does): it takes no protection options, and refuses
    an ``embeddings_cache``, which would keep the clean vectors in plain text. The vectors it
    releases are remembered as keyed digests (:data:`~.instrumentation.SILENT_VECTORS`), so a
    two-stage store can warn (:class:`~.instrumentation.ReportedVectorsWarning`) when it is given
    vectors that a plain model made -- and so already reported.

    Example:
        >>> embed_model = SealedEmbedding(base=encoder)
        >>> ctx = sealed_storage_context(vector_store=qdrant_store, key=KEY, search=TwoStageSearch(open_k=200),
        ...                              embed_model=embed_model)
        >>> index = VectorStoreIndex(nodes, storage_context=ctx, embed_model=embed_model)

    Args:
        base: The plain encoder: a LlamaIndex ``BaseEmbedding`` (its query path is kept, for models
            that embed queries differently), a sentence-transformers model, a
            :class:`textcrafter_rag.Encoder` or a callable ``list[str] -> array``. ``None`` uses the
            bundled offline all-MiniLM-L6-v2.
        report_vectors: Put the clean vectors in LlamaIndex's events, callback payloads and span
            results (default ``False``).
        **kwargs: ``BaseEmbedding`` fields (``embed_batch_size``, ``callback_manager``, ...). For a
            LlamaIndex base, ``embed_batch_size``, ``num_workers`` and ``rate_limiter`` default to the base's.

    Raises:
        textcrafter_rag.errors.InvalidInputError: A protection option (``mechanism``, ``key``, ...) or
            an ``embeddings_cache`` was given.
    """

    _documents: Encoder = PrivateAttr()
    _queries: Encoder = PrivateAttr()
    _init_args: dict[str, Any] = PrivateAttr()

    def __init__(self, *, base: Any = None, **kwargs: Any) -> None:
        overrides, kwargs = ProtectionOptions.split(kwargs)
        if overrides:
            raise InvalidInputError(
                f"SealedEmbedding does not protect vectors (the sealed store does); drop {', '.join(sorted(overrides))}"
            )
        if kwargs.get("embeddings_cache") is not None:
            raise InvalidInputError("SealedEmbedding takes no embeddings_cache: it would keep the clean vectors")
        init_args = dict(base=base, **kwargs)
        if base is None:
            base = bundled_minilm()
        if isinstance(base, BaseEmbedding):
            documents, queries = span_free_encoders(base)
        else:
            documents = queries = as_encoder(base)
        _inherit(base, kwargs, cache_hint="")
        kwargs.setdefault("model_name", f"sealed:{documents.model_id}")
        super().__init__(**kwargs)
        self._documents = documents
        self._queries = queries
        self._init_args = init_args

    def __reduce__(self) -> Any:
        return (functools.partial(type(self), **self._init_args), ())

    @classmethod
    def class_name(cls) -> str:
        return "TextCrafterSealedEmbedding"

    @staticmethod
    def _released(vectors: Any) -> list[Embedding]:
        out = vectors.tolist()
        SILENT_VECTORS.add(out)
        return out

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embedding(self, text: str) -> Embedding:
        return self._released(self._documents.encode([text]))[0]

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._released(self._documents.encode(texts))

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embedding(self, text: str) -> Embedding:
        return self._released(await self._documents.aencode([text]))[0]

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._released(await self._documents.aencode(texts))

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._released(self._queries.encode([query]))[0]

    @without_span  # a span around it would hand its result, the vectors, to span handlers
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._released(await self._queries.aencode([query]))[0]

    def get_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., Embedding] | None = None
    ) -> Embedding:
        """LlamaIndex's aggregate of the query vectors (the retrievers' path), remembered as released too."""
        vector = super().get_agg_embedding_from_queries(queries, agg_fn)
        SILENT_VECTORS.add([vector])
        return vector

    async def aget_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., Embedding] | None = None
    ) -> Embedding:
        """Async :meth:`get_agg_embedding_from_queries`."""
        vector = await super().aget_agg_embedding_from_queries(queries, agg_fn)
        SILENT_VECTORS.add([vector])
        return vector
