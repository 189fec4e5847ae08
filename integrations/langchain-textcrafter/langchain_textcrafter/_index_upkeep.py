"""Index upkeep of the LangChain :class:`~.sealed.SealedVectorStore`: saving, rebuilding and compacting its index.

The sealed index (the store-held one by default, or the app-side file) picks the records a search reads; these
are the operations that keep it whole: write the app-side file now, rebuild the store-held index from the
sealed records a store lists, and compact the store-held index's log into one sealed snapshot.
"""

from __future__ import annotations

import functools

from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.index_modes import compact_store_index

__all__ = ["SealedIndexUpkeep"]


class SealedIndexUpkeep:
    """Saves, rebuilds and compacts the sealed index (mixed into the store)."""

    _search: SealedSearch

    # ``_marker`` is the reading steps' (:mod:`._reading`).

    def save_index(self) -> None:
        """Write the app-side index to its ``index_path`` now (it is also written after every write).

        Raises:
            ValueError: The store does not use the app-side index, or has no ``index_path``.
            textcrafter_rag.sealed.app_index.IndexConflictError: Another process wrote the file since.
        """
        self._search.save_index()

    def rebuild_index(self, *, batch_size: int = 1_000, progress: bool = True) -> int:
        """Rebuild the store-held index from the sealed records the wrapped store holds; how many were indexed.

        For a store whose records were written without it (an older release, the app-side index file) or
        whose log was lost. Needs a store that can list its records (InMemory, Chroma, FAISS, Qdrant, Milvus).
        """
        marker = functools.partial(self._marker, write=False)  # names the index's dimension
        return self._search.rebuild_index(batch_size=batch_size, progress=progress, before=marker)

    def compact_index(self) -> bool:
        """Compact the store-held index's log into one sealed snapshot now; whether one was written (see
        :func:`~textcrafter_rag.sealed.index_modes.compact_store_index`)."""
        self._marker(write=False)  # the marker names the store-held index's dimension
        return compact_store_index(self._search.indexes)
