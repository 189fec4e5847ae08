"""LlamaIndex integration for textcrafter-rag: ``ProtectedEmbedding``."""

from __future__ import annotations

from llama_index.embeddings.textcrafter.base import BypassedCacheWarning, ProtectedEmbedding

__all__ = ["ProtectedEmbedding", "BypassedCacheWarning"]
