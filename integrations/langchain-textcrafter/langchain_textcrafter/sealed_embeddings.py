"""The embeddings a sealed store hands to the store it builds: sealed texts are embedded as their plaintext.

A LangChain store embeds the texts it is given inside its own ``add_texts``. Handed sealed texts, it
would embed the ciphertext and retrieval would be noise. So :class:`SealedVectorStore` builds the
wrapped store itself, passing it a :class:`SealedTextEmbeddings`: before the wrapped store adds
sealed texts, the sealed store registers each sealed text's vector here (computed from the
plaintext), and this object answers with it. It never sees a plaintext document, and nothing patches
the wrapped store: it was built with this object.

Plain texts pass through to the user's embeddings. Queries go through the function the sealed store
chooses (the user's ``embed_query``, or a protected query in two-stage search). A sealed text with no
registered vector (someone adding sealed texts to the wrapped store directly) raises
:class:`~textcrafter_rag.sealing.SealError` instead of embedding the ciphertext.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.errors import InvalidTypeError
from textcrafter_rag.sealing import Sealer, SealError

__all__ = ["SealedTextEmbeddings", "adopted_embeddings", "build_wrapped"]


class SealedTextEmbeddings(Embeddings):
    """Answer for sealed texts with the vectors registered for them; plain texts through ``inner``.

    Args:
        inner: The user's embeddings (plain documents).
        query: How a query text becomes the vector the store receives (default ``inner.embed_query``).
        aquery: Async ``query`` (default ``inner.aembed_query``).
    """

    def __init__(
        self,
        inner: Embeddings,
        *,
        query: Callable[[str], list[float]] | None = None,
        aquery: Callable[[str], Awaitable[list[float]]] | None = None,
    ) -> None:
        self.inner = inner
        self._query = query or inner.embed_query
        self._aquery = aquery or inner.aembed_query
        self._vectors: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @contextmanager
    def registered(self, vectors: Mapping[str, list[float]]) -> Iterator[None]:
        """Make ``sealed text -> vector`` available while the wrapped store adds those texts."""
        with self._lock:
            self._vectors.update(vectors)
        try:
            yield
        finally:
            with self._lock:
                for token in vectors:
                    self._vectors.pop(token, None)

    def _split(self, texts: list[str]) -> tuple[list[Any], list[int]]:
        out: list[Any] = [None] * len(texts)
        plain: list[int] = []
        with self._lock:
            for i, text in enumerate(texts):
                if text in self._vectors:
                    out[i] = self._vectors[text]
                elif Sealer.is_sealed(text):
                    raise SealError(
                        "the wrapped store was asked to embed a sealed text that is not being added through "
                        "its SealedVectorStore; its vector would be the ciphertext's"
                    )
                else:
                    plain.append(i)
        return out, plain

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Registered vectors for sealed texts, the user's embeddings for plain ones."""
        out, plain = self._split(list(texts))
        if plain:
            for i, vector in zip(plain, self.inner.embed_documents([texts[i] for i in plain]), strict=True):
                out[i] = vector
        return out

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async :meth:`embed_documents`."""
        out, plain = self._split(list(texts))
        if plain:
            vectors = await self.inner.aembed_documents([texts[i] for i in plain])
            for i, vector in zip(plain, vectors, strict=True):
                out[i] = vector
        return out

    def embed_query(self, text: str) -> list[float]:
        """The vector the store is searched with for ``text``."""
        return self._query(text)

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`."""
        return await self._aquery(text)

    def __repr__(self) -> str:
        return f"SealedTextEmbeddings(inner={self.inner!r})"


def adopted_embeddings(store: Any, embedding: Embeddings | None) -> Embeddings:
    """The user's embeddings: ``embedding``, or those of the sealed store whose ``.store`` is ``store``.

    Raises:
        TypeError: ``store`` is a store built with other embeddings (it would embed the ciphertext), is no
            function, or ``embedding`` is not LangChain embeddings.
    """
    if isinstance(store, VectorStore):
        adopted = store.embeddings
        if not isinstance(adopted, SealedTextEmbeddings):
            raise InvalidTypeError(
                f"pass a function that builds the store from the embeddings it is given, e.g. "
                f"SealedVectorStore(lambda e: {type(store).__name__}(..., embedding=e), embedding=..., key=KEY), "
                "or the .store of another SealedVectorStore: a store built with other embeddings would embed "
                "the ciphertext"
            )
        if embedding is not None and embedding is not adopted.inner:
            raise InvalidTypeError("embedding must be the one the wrapped store's sealed store was built with")
        embedding = adopted.inner
    elif not callable(store):
        raise InvalidTypeError(f"store must be a function building a VectorStore, got {type(store).__name__}")
    if not isinstance(embedding, Embeddings):
        raise InvalidTypeError(f"embedding must be LangChain Embeddings, got {type(embedding).__name__}")
    return embedding


def build_wrapped(
    store: Any,
    embedding: Embeddings,
    *,
    query: Callable[[str], list[float]] | None,
    aquery: Callable[[str], Awaitable[list[float]]] | None,
) -> tuple[Any, SealedTextEmbeddings]:
    """The wrapped store and its shim: ``store(shim)`` with a new shim, or an adopted store with its own."""
    if isinstance(store, VectorStore):
        return store, store.embeddings
    shim = SealedTextEmbeddings(embedding, query=query, aquery=aquery)
    inner = store(shim)
    if not isinstance(inner, VectorStore) or inner.embeddings is not shim:
        raise InvalidTypeError(
            "the store function must return a LangChain VectorStore built with the embeddings it is given "
            "(e.g. lambda e: QdrantVectorStore(client=client, collection_name='docs', embedding=e))"
        )
    return inner, shim
