"""LangChain integration for textcrafter-rag.

``ProtectedEmbeddings`` wraps any embedding model so that only protected vectors reach a
vector store::

    from langchain_textcrafter import ProtectedEmbeddings
    embeddings = ProtectedEmbeddings(base=OpenAIEmbeddings(), policy="path/to/policy")
"""

from __future__ import annotations

from textcrafter_rag import FingerprintMismatch, MissingPolicyError

from .embeddings import ProtectedEmbeddings, RawVectorCacheWarning

__version__ = "0.1.0"

__all__ = ["FingerprintMismatch", "MissingPolicyError", "ProtectedEmbeddings", "RawVectorCacheWarning", "__version__"]
