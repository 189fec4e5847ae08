"""The ``textcrafter_rag.encoder_adapters`` entry point: span-free encoders for LlamaIndex models.

The core loads every registered adapter the first time it wraps any base model (a LangChain one
included), so this module must stay light: it imports LlamaIndex only once LlamaIndex is already
loaded, since a base cannot be a LlamaIndex model before that. With it, ``textcrafter_rag.as_encoder``
and ``Protector(base=...)`` call a LlamaIndex model without its span decorators, so span handlers
never receive raw vectors (the core's duck-typed fallback would call the decorated methods).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from textcrafter_rag.encoders import Encoder

__all__ = ["span_free_document_encoder"]

_LLAMA_CORE = "llama_index.core"
_BASE_MODULE = "llama_index.embeddings.textcrafter.base"


def span_free_document_encoder(base: Any) -> Encoder | None:
    """The span-free document encoder of a LlamaIndex ``BaseEmbedding``; ``None`` for anything else.

    An :data:`textcrafter_rag.encoders.EncoderAdapter`, registered in this package's pyproject.toml.
    """
    if sys.modules.get(_LLAMA_CORE) is None:
        return None  # LlamaIndex is not loaded, so base is no LlamaIndex model: stay light
    implementation = importlib.import_module(_BASE_MODULE)  # cheap now: LlamaIndex is already loaded
    if not isinstance(base, implementation.BaseEmbedding):
        return None
    documents, _ = implementation.span_free_encoders(base)
    return documents
