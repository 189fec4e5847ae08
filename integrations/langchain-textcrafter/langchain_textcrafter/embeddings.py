"""LangChain ``Embeddings`` that protect every document vector before it reaches a vector store."""

from __future__ import annotations

import functools
import warnings
from typing import Any

from langchain_core.embeddings import Embeddings

from textcrafter_rag import Encoder, Mechanism, Protector
from textcrafter_rag.adapters import build_protector, per_text_encoder
from textcrafter_rag.options import ProtectionOptions

__all__ = ["ProtectedEmbeddings", "RawVectorCacheWarning"]


class RawVectorCacheWarning(UserWarning):
    """The base embeddings cache raw (unprotected) vectors."""


def _paths(base: Any) -> tuple[Any, Encoder | None]:
    """Documents through the base; queries through its own ``embed_query`` if it is a LangChain model.

    Asymmetric models (instruction prefixes, ``input_type="search_query"``) embed queries
    differently from documents; only a LangChain ``Embeddings`` base exposes that difference.
    """
    if not isinstance(base, Embeddings):
        return base, None
    return base, per_text_encoder(
        base.embed_query, base.aembed_query, model_id=f"langchain-query:{type(base).__name__}"
    )


def _warn_if_raw_cache(base: Any) -> None:
    if hasattr(base, "underlying_embeddings") and hasattr(base, "document_embedding_store"):
        warnings.warn(
            "base is a CacheBackedEmbeddings: its cache stores the RAW vectors, which an inversion attack "
            "can read. Wrap the other way round so only protected vectors are cached: "
            "CacheBackedEmbeddings.from_bytes_store(ProtectedEmbeddings(base=...), store, namespace=...)",
            RawVectorCacheWarning,
            stacklevel=3,
        )


class ProtectedEmbeddings(Embeddings):
    """Embed with any base model, then protect document vectors with a mechanism (default: TextCrafter).

    All protection is done by :class:`textcrafter_rag.Protector` (built by
    :func:`textcrafter_rag.adapters.build_protector`, like the LlamaIndex adapter's); this class only
    adapts its NumPy output to LangChain's ``list[list[float]]``.

    Example:
        >>> from langchain_openai import OpenAIEmbeddings
        >>> emb = ProtectedEmbeddings(base=OpenAIEmbeddings(), mechanism="path/to/policy")
        >>> store = FAISS.from_texts(texts, emb)  # stores protected vectors only

    Args:
        base: The base model: a LangChain ``Embeddings``, a sentence-transformers model, a
            :class:`textcrafter_rag.Encoder` or a callable ``list[str] -> array``. ``None`` uses the
            bundled offline all-MiniLM-L6-v2.
        options: The protection options, the same object for the core and every adapter
            (:class:`textcrafter_rag.options.ProtectionOptions`).
        **overrides: Any of those options by keyword: ``mechanism`` (``"auto"``, the default, uses the
            TextCrafter policy shipped or cached for the encoder, or fits one on first use; or a spec
            string such as ``"gaussian:s=0.01"``, a policy directory or a mechanism), ``protect_queries``,
            ``secure_mode``, ``seed``, ``chunk_size``, ``key`` and ``tenant`` (a secret from
            ``textcrafter keygen`` and a tenant id: documents and queries are rotated by the tenant's
            secret orthogonal matrix; only the protector holds the key, it appears in no repr,
            serialisation or error). ``policy=`` is the deprecated name of ``mechanism=``.

    Pickling (process pools) rebuilds the adapter from its constructor arguments in the other
    process. A key given by value refuses to be pickled
    (:class:`~textcrafter_rag.errors.NotPicklableError`); a key read with
    ``textcrafter_rag.sealing.load_key(PATH)`` or ``load_key(env=NAME)`` travels as that reference
    and each process reads it itself.

    Raises:
        textcrafter_rag.MissingPolicyError: No policy ships or is cached for the encoder and
            ``TEXTCRAFTER_AUTO_FIT=0`` forbids fitting one.
        textcrafter_rag.FingerprintMismatch: The policy was fitted for another encoder.
    """

    def __init__(self, *, base: Any = None, options: ProtectionOptions | None = None, **overrides: Any) -> None:
        options = ProtectionOptions.build(options, overrides)
        _warn_if_raw_cache(base)
        built = build_protector(base, options=options, paths=_paths)
        self.base = built.base
        self.protector: Protector = built.protector
        # what a pickled copy is rebuilt from: the options hold the key as a SecretKey (a reference, or refused)
        self._init_args = {"base": base, "options": options}

    def __reduce__(self) -> Any:
        return (functools.partial(type(self), **self._init_args), ())

    @property
    def protect_queries(self) -> bool:
        """Whether query vectors are protected too."""
        return self.protector.protect_queries

    @property
    def mechanism(self) -> Mechanism:
        """The protection mechanism (e.g. the loaded TextCrafter policy)."""
        return self.protector.mechanism

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed and protect documents (one mechanism call for the whole batch)."""
        return self.protector.embed_documents(texts).tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async :meth:`embed_documents`: awaits the base's native async method."""
        return (await self.protector.aembed_documents(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the base's query path: noised only if ``protect_queries``, rotated whenever keyed."""
        return self.protector.embed_query(text).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`."""
        return (await self.protector.aembed_query(text)).tolist()

    def __repr__(self) -> str:
        return f"ProtectedEmbeddings(protector={self.protector!r})"
