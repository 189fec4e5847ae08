"""LlamaIndex integration for textcrafter-rag: ``ProtectedEmbedding`` and the sealed stores.

* ``ProtectedEmbedding`` protects every document vector before it is stored.
* ``SealedEmbedding`` is the plain encoder for sealed search, reporting no vectors to LlamaIndex's events,
  callbacks or spans (a ``ProtectedEmbedding`` given to the sealed store as ``embed_model=`` is read through
  its base encoder the same way).
* ``StoreIndexSearch``, ``TwoStageSearch``, ``AppIndexSearch``, ``SingleStageSearch``: the options ``search=``
  takes, one per mode.
* ``SealedVectorStore`` wraps a vector store so it holds only sealed nodes (stores that keep text).
* ``SealedKVStore`` / ``sealed_storage_context`` seal the docstore and index store (where the text
  lives for stores that keep none, such as FAISS).

The core never imports this package, so nothing here is loaded behind the user's back; LlamaIndex
specifics live here (:mod:`.encoders` calls a LlamaIndex model without instrumentation), and the core
refuses a LlamaIndex model handed to it directly.
"""

from __future__ import annotations

from llama_index.embeddings.textcrafter.base import BypassedCacheWarning, ProtectedEmbedding, SealedEmbedding
from llama_index.embeddings.textcrafter.instrumentation import ReportedVectorsWarning
from llama_index.embeddings.textcrafter.sealed_storage import SealedKVStore, sealed_storage_context
from llama_index.embeddings.textcrafter.sealed_vector_store import SealedVectorStore
from textcrafter_rag import AppIndexSearch, SingleStageSearch, StoreIndexSearch, TwoStageSearch

__all__ = [
    "AppIndexSearch",
    "BypassedCacheWarning",
    "ProtectedEmbedding",
    "ReportedVectorsWarning",
    "SealedEmbedding",
    "SealedKVStore",
    "SealedVectorStore",
    "SingleStageSearch",
    "StoreIndexSearch",
    "TwoStageSearch",
    "sealed_storage_context",
]
