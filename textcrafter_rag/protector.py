"""The framework-free core: encode texts with a base encoder, then protect the vectors.

Both framework adapters (LangChain, LlamaIndex) are thin wrappers around :class:`Protector`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from .encoders import Encoder, as_encoder, encoder_from_name
from .errors import InvalidInputError
from .keyed import KeyArg, KeyedRotation, TenantKey
from .mechanisms import Mechanism
from .options import ProtectionOptions
from .specs import resolve_mechanism
from .validation import check_text, check_texts, check_vectors

__all__ = ["Protector", "protector_for"]


class Protector:
    """Embed texts with a base encoder and protect every vector before it leaves.

    Args:
        base: Any base encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts, or ``None``
            when only precomputed vectors are protected.
        query_base: A separate encoder for queries, for models that embed queries differently from
            documents (instruction prefixes, ``input_type="search_query"``); default ``base``.
        options: The protection options (:class:`~textcrafter_rag.options.ProtectionOptions`): the
            mechanism, ``protect_queries``, ``secure_mode``, ``seed``, ``chunk_size``, ``key``, ``tenant``.
        **overrides: Any of those options by keyword, applied over ``options``
            (``Protector(base=m, mechanism="gaussian:s=0.01", key=KEY)``); ``policy=`` is the deprecated
            name of ``mechanism=``. With a key, every released vector -- documents after the mechanism,
            queries whether protected or not -- is rotated by the tenant's secret orthogonal matrix
            (:class:`~textcrafter_rag.keyed.KeyedRotation`), so inner products and distances between
            documents and queries are unchanged while a store host without the key no longer sees
            vectors in the encoder's basis. The key is never stored in a repr, error or log.

    Raises:
        InvalidKeyError: ``key`` is malformed (the message never contains it).
        InvalidTypeError, InvalidInputError: A bad option (:class:`~textcrafter_rag.options.ProtectionOptions`).
        ValueError: A ``TenantKey`` with another ``tenant``.
    """

    def __init__(
        self, *, base: Any = None, query_base: Any = None, options: ProtectionOptions | None = None, **overrides: Any
    ) -> None:
        self.options = options = ProtectionOptions.build(options, overrides)
        self._key = _tenant_key(options.key, options.tenant)  # checks the key before any model loads
        self._rotation: KeyedRotation | None = None
        self.encoder: Encoder | None = as_encoder(base) if base is not None else None
        self.query_encoder: Encoder | None = as_encoder(query_base) if query_base is not None else self.encoder
        self.mechanism: Mechanism = resolve_mechanism(
            options.mechanism, encoder=self.encoder, secure_mode=options.secure_mode, seed=options.seed
        )
        self.protect_queries = options.protect_queries
        self.chunk_size = options.chunk_size
        if self._key is not None and self.mechanism.dim is not None:  # (an encoder's dimension may need a call)
            self._rotation = self._key.rotation(self.mechanism.dim)  # built (or cached) now, not on first use

    @property
    def dimension(self) -> int | None:
        """The protected dimension, when known."""
        if self.mechanism.dim is not None:
            return self.mechanism.dim
        if self.encoder is not None:
            return self.encoder.dimension
        return self._rotation.dim if self._rotation is not None else None

    @property
    def keyed(self) -> bool:
        """Whether releases are rotated under a secret key."""
        return self._key is not None

    @property
    def key_fingerprint(self) -> str | None:
        """The fingerprint of the key and tenant (:attr:`TenantKey.fingerprint`; not secret), or ``None``."""
        return self._key.fingerprint if self._key is not None else None

    @property
    def rotation(self) -> KeyedRotation | None:
        """The tenant's :class:`~textcrafter_rag.keyed.KeyedRotation`, or ``None``.

        ``None`` without a key, and before the first call when the policy does not fix the dimension
        (the first vectors then fix it).
        """
        return self._rotation

    def _rotate(self, x: np.ndarray) -> np.ndarray:
        if self._key is None:
            return x
        if self._rotation is None:
            self._rotation = self._key.rotation(int(x.shape[1]))
        return self._rotation.apply(x)

    def protect(self, vectors: Any) -> np.ndarray:
        """Protect precomputed vectors ``(n, D)``; returns a new float32 array.

        The whole batch is validated before any row is protected, and a failure in any chunk
        raises without returning anything: no partial batch is ever released.
        """
        x = check_vectors(vectors, dim=self.dimension)  # validated once, here, for every chunk
        if x.shape[0] <= self.chunk_size:
            return self._rotate(self.mechanism._release(x))
        out = np.empty_like(x)
        for start in range(0, x.shape[0], self.chunk_size):
            stop = start + self.chunk_size
            out[start:stop] = self._rotate(self.mechanism._release(np.ascontiguousarray(x[start:stop])))
        return out

    def protect_query_vectors(self, vectors: Any) -> np.ndarray:
        """What to search a store with, from precomputed query vectors ``(n, D)`` (float32).

        Protected like documents if ``protect_queries``; otherwise returned clean, or only rotated
        under the key (without the same rotation they would not match the stored documents). The
        same checks either way: a key never changes which input is accepted.
        """
        if self.protect_queries:
            return self.protect(vectors)
        return self._rotate(check_vectors(vectors, dim=self.dimension, name="query vectors"))

    def _require_encoder(self, *, query: bool = False) -> Encoder:
        enc = self.query_encoder if query else self.encoder
        if enc is None:
            raise InvalidInputError("this Protector has no base encoder; pass base=... to embed texts")
        return enc

    def _empty(self) -> np.ndarray:
        return np.empty((0, self._require_encoder().dimension), dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed and protect documents. An empty list gives a ``(0, D)`` array."""
        texts = check_texts(texts, allow_empty_batch=True)
        if not texts:
            return self._empty()
        return self.protect(self._require_encoder().encode(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed a query: noised only if ``protect_queries``, rotated whenever keyed. Returns a 1-D array."""
        text = check_text(text, name="query")
        vec = self._require_encoder(query=True).encode([text])
        return self.protect_query_vectors(vec)[0]

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Async :meth:`embed_documents`: awaits the base's native async method, then protects."""
        texts = check_texts(texts, allow_empty_batch=True)
        if not texts:
            return self._empty()
        vecs = await self._require_encoder().aencode(texts)
        return await asyncio.to_thread(self.protect, vecs)

    async def aembed_query(self, text: str) -> np.ndarray:
        """Async :meth:`embed_query`."""
        text = check_text(text, name="query")
        vec = await self._require_encoder(query=True).aencode([text])
        return (await asyncio.to_thread(self.protect_query_vectors, vec))[0]

    def __repr__(self) -> str:
        keyed = f", key=<redacted>, tenant={self._key.tenant!r}" if self._key is not None else ""
        return (
            f"Protector(encoder={self.encoder!r}, mechanism={self.mechanism!r}, "
            f"protect_queries={self.protect_queries}{keyed})"
        )


def _tenant_key(key: KeyArg | TenantKey | None, tenant: str) -> TenantKey | None:
    return None if key is None else TenantKey.of(key, tenant=tenant)  # (tenant without key: ProtectionOptions)


def protector_for(
    *, encoder: str | None = None, options: ProtectionOptions | None = None, **overrides: Any
) -> Protector:
    """A :class:`Protector` from names, as the CLI and Ray actors get them.

    Args:
        encoder: ``"bundled"``, a sentence-transformers model name or path, or ``None`` for
            vectors only. With neither a mechanism nor an encoder, the vectors are taken to come from
            the bundled all-MiniLM-L6-v2 and its shipped policy is used (a 768-d input then fails
            the dimension check with a clear error).
        options, **overrides: The protection options, as for :class:`Protector`; ``mechanism=None``
            means ``"auto"`` (see :func:`~textcrafter_rag.specs.resolve_mechanism`).
    """
    base = encoder_from_name(encoder) if encoder is not None else None
    return Protector(base=base, options=ProtectionOptions.build(options, overrides))
