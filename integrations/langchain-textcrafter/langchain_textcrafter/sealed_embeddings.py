"""The wrapped store's embeddings, seen through a sealed store: sealed texts are embedded as their plaintext.

A LangChain store embeds the texts it is given inside its own ``add_texts``. Handed sealed texts,
it would embed the ciphertext and retrieval would be noise. :class:`SealedVectorStore` therefore
embeds the plaintexts itself (one batch, through the user's embeddings), registers each sealed
text's vector here, and only then lets the wrapped store add the sealed texts: this object, put in
place of the store's embeddings, answers with the registered vectors. It never sees a plaintext.

Plain texts and queries pass through to the user's embeddings unchanged. A sealed text with no
registered vector (someone adding sealed texts to the wrapped store directly) raises
:class:`~textcrafter_rag.sealing.SealError` instead of embedding the ciphertext.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.sealing import Sealer, SealError

__all__ = ["SealedTextEmbeddings", "install_sealed_embeddings"]


class SealedTextEmbeddings(Embeddings):
    """Answer for sealed texts with the vectors registered for them; delegate everything else.

    Args:
        inner: The embeddings the wrapped store was built with.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
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
        """Queries are plaintext: the user's embeddings."""
        return self.inner.embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`."""
        return await self.inner.aembed_query(text)

    def __repr__(self) -> str:
        return f"SealedTextEmbeddings(inner={self.inner!r})"


def install_sealed_embeddings(store: VectorStore) -> SealedTextEmbeddings:
    """Put a :class:`SealedTextEmbeddings` in place of ``store.embeddings`` (or find the one already there).

    LangChain has no common "add these texts with these vectors" method, but every store keeps its
    embeddings in an attribute (``FAISS.embedding_function``, ``QdrantVectorStore._embeddings``, ...)
    and exposes it as ``store.embeddings``; the attribute holding that object is replaced.

    Raises:
        TypeError: The store exposes no ``embeddings``, or keeps it where it cannot be replaced.
    """
    current = store.embeddings
    if isinstance(current, SealedTextEmbeddings):
        return current
    if current is None:
        raise TypeError(
            f"{type(store).__name__} exposes no `embeddings`: a SealedVectorStore must embed the plaintexts "
            "itself, with the store's embeddings, before the store sees only sealed texts"
        )
    try:
        names = [name for name, value in vars(store).items() if value is current]
    except TypeError:
        names = []
    shim = SealedTextEmbeddings(current)
    for name in names:
        setattr(store, name, shim)
    if not names or store.embeddings is not shim:
        for name in names:
            setattr(store, name, current)
        raise TypeError(
            f"cannot route {type(store).__name__}'s embeddings through the sealed store (no attribute holds "
            "`store.embeddings`); this store is not supported"
        )
    return shim
