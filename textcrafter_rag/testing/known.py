"""Known raw vectors for fake base models, with a log of which path served which text."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

import numpy as np

from ..errors import InvalidInputError

__all__ = ["PATHS", "KnownVectors"]

#: The four ways an adapter can reach a base model (named after LangChain's methods, the shortest).
PATHS: tuple[str, ...] = ("embed_documents", "aembed_documents", "embed_query", "aembed_query")


def _unit(key: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return (v / np.linalg.norm(v)).tolist()


class KnownVectors:
    """The raw vectors a fake base model serves: fixed per text, different for documents and queries.

    A fake base of any framework delegates here, so a test knows every raw vector an adapter could
    leak, and :attr:`served` tells which path (sync or async, document or query) each text took.

    Args:
        dim: The embedding dimension.
    """

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.served: dict[str, list[str]] = {path: [] for path in PATHS}
        self._lock = threading.Lock()

    def document_vector(self, text: str) -> list[float]:
        """The raw document vector of ``text`` (not logged)."""
        return _unit("doc:" + text, self.dim)

    def query_vector(self, text: str) -> list[float]:
        """The raw query vector of ``text``, different from its document vector (not logged)."""
        return _unit("query:" + text, self.dim)

    def document_vectors(self, texts: Iterable[str]) -> list[list[float]]:
        """The raw document vectors of ``texts`` (not logged)."""
        return [self.document_vector(t) for t in texts]

    def serve_documents(self, texts: Iterable[str], *, path: str = "embed_documents") -> list[list[float]]:
        """What a fake base's document method returns; logs the texts under ``path``."""
        texts = list(texts)
        self._log(path, texts)
        return self.document_vectors(texts)

    def serve_query(self, text: str, *, path: str = "embed_query") -> list[float]:
        """What a fake base's query method returns; logs the text under ``path``."""
        self._log(path, [text])
        return self.query_vector(text)

    def _log(self, path: str, texts: list[str]) -> None:
        if path not in self.served:
            raise InvalidInputError(f"unknown path {path!r}; choose from {', '.join(PATHS)}")
        with self._lock:
            self.served[path].extend(texts)
