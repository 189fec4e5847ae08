"""LlamaIndex integration for textcrafter-rag: ``ProtectedEmbedding``.

The names are loaded on first access (PEP 562) so that importing this package stays light: the
core imports :mod:`.encoder_adapter`, and with it this package, for every base model it wraps,
LangChain ones included, and must not pull in LlamaIndex for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_index.embeddings.textcrafter.base import BypassedCacheWarning, ProtectedEmbedding

__all__ = ["BypassedCacheWarning", "ProtectedEmbedding"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("llama_index.embeddings.textcrafter.base"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
