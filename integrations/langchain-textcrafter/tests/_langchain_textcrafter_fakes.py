"""Fakes for the langchain-textcrafter tests (a uniquely named module: test folders share sys.path)."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from textcrafter_rag.testing import KnownVectors


class FakeAsymmetricEmbeddings(Embeddings):
    """A LangChain base serving :class:`KnownVectors`: query vectors differ from document vectors."""

    def __init__(self, known: KnownVectors | None = None) -> None:
        self.known = known or KnownVectors()

    def doc(self, text: str) -> list[float]:
        return self.known.document_vector(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.known.serve_documents(texts, path="embed_documents")

    def embed_query(self, text: str) -> list[float]:
        return self.known.serve_query(text, path="embed_query")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.known.serve_documents(texts, path="aembed_documents")

    async def aembed_query(self, text: str) -> list[float]:
        return self.known.serve_query(text, path="aembed_query")
