"""LlamaIndex integration for textcrafter-rag: ``ProtectedEmbedding`` and the sealed stores.

* ``ProtectedEmbedding`` protects every document vector before it is stored.
* ``SealedVectorStore`` wraps a vector store so it holds only sealed nodes (stores that keep text).
* ``SealedKVStore`` / ``sealed_storage_context`` seal the docstore and index store (where the text
  lives for stores that keep none, such as FAISS).

The names are loaded on first access (PEP 562) so that importing this package stays light: the
core imports :mod:`.encoder_adapter`, and with it this package, for every base model it wraps,
LangChain ones included, and must not pull in LlamaIndex for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_index.embeddings.textcrafter.base import BypassedCacheWarning, ProtectedEmbedding
    from llama_index.embeddings.textcrafter.sealed_storage import SealedKVStore, sealed_storage_context
    from llama_index.embeddings.textcrafter.sealed_vector_store import SealedVectorStore

_MODULES = {
    "BypassedCacheWarning": "base",
    "ProtectedEmbedding": "base",
    "SealedKVStore": "sealed_storage",
    "sealed_storage_context": "sealed_storage",
    "SealedVectorStore": "sealed_vector_store",
}

__all__ = ["BypassedCacheWarning", "ProtectedEmbedding", "SealedKVStore", "SealedVectorStore", "sealed_storage_context"]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = getattr(importlib.import_module(f"llama_index.embeddings.textcrafter.{_MODULES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
