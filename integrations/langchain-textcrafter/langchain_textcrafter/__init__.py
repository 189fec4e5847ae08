"""LangChain integration for textcrafter-rag.

``ProtectedEmbeddings`` wraps any embedding model so that only protected vectors reach a
vector store; ``SealedVectorStore`` wraps the store so that only sealed (encrypted) texts and
named metadata fields reach it::

    from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore
    embeddings = ProtectedEmbeddings(base=OpenAIEmbeddings())  # mechanism="auto"
    store = SealedVectorStore(InMemoryVectorStore, embedding=embeddings, key=KEY, sealed_metadata=("author",))

The search mode is chosen with ``search=``: ``StoreIndexSearch()`` (the default where the store reads by id),
``TwoStageSearch(open_k=...)`` (candidates), ``AppIndexSearch(...)`` or ``SingleStageSearch()`` (``None`` too).
"""

from __future__ import annotations

from textcrafter_rag import (
    AppIndexSearch,
    FingerprintMismatch,
    MissingPolicyError,
    SingleStageSearch,
    StoreIndexSearch,
    TwoStageSearch,
)
from textcrafter_rag.sealing import SealError

from .embeddings import ProtectedEmbeddings, RawVectorCacheWarning
from .sealed import SealedVectorStore

__version__ = "0.1.0"

__all__ = [
    "AppIndexSearch",
    "FingerprintMismatch",
    "MissingPolicyError",
    "ProtectedEmbeddings",
    "RawVectorCacheWarning",
    "SealError",
    "SealedVectorStore",
    "SingleStageSearch",
    "StoreIndexSearch",
    "TwoStageSearch",
    "__version__",
]
