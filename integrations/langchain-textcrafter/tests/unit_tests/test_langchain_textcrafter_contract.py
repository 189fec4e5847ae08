"""ProtectedEmbeddings against the adapter contract shared with the LlamaIndex adapter."""

from __future__ import annotations

from typing import Any

from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings

from langchain_textcrafter import ProtectedEmbeddings
from textcrafter_rag.testing import KnownVectors
from textcrafter_rag.testing.contract import ProtectedEmbeddingsContract


class TestProtectedEmbeddingsContract(ProtectedEmbeddingsContract):
    """LangChain ``Embeddings`` emit no callbacks or events, so the hook test skips."""

    def make_embeddings(self, **options: Any) -> ProtectedEmbeddings:
        return ProtectedEmbeddings(**options)

    def make_base(self, known: KnownVectors) -> FakeAsymmetricEmbeddings:
        return FakeAsymmetricEmbeddings(known)

    def embed_documents(self, embeddings: ProtectedEmbeddings, texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    async def aembed_documents(self, embeddings: ProtectedEmbeddings, texts: list[str]) -> list[list[float]]:
        return await embeddings.aembed_documents(texts)

    def embed_query(self, embeddings: ProtectedEmbeddings, text: str) -> list[float]:
        return embeddings.embed_query(text)

    async def aembed_query(self, embeddings: ProtectedEmbeddings, text: str) -> list[float]:
        return await embeddings.aembed_query(text)
