"""The store-held index (the default): the application's index picks the records, its sealed log lives in the store.

Every process that holds the key rebuilds the index from the log in the user's own store
(:mod:`~textcrafter_rag.sealed.log`) and reads what other processes wrote before each search, so an add that
returned is found by every process at its next search.
"""

from __future__ import annotations

from ..engine import SearchCore
from ..store_index import StoreIndexSearch
from .picked import PickedSearch

__all__ = ["STORE_INDEX", "StoreIndexMode"]


class StoreIndexMode(PickedSearch):
    """The store-held index mode."""

    name = "store-index"
    options_type = StoreIndexSearch
    #: Each process is its own writer of the log in the store.
    parallel_writers = True

    def reopened(self) -> StoreIndexSearch:
        """The options a store written in this mode is opened with when the caller names none."""
        return StoreIndexSearch()

    def settle(self, core: SearchCore, dim: int | None) -> None:
        """Open the index with the marker's dimension: a process that deletes before it adds or searches knows it."""
        if dim is not None:
            core.store_index(dim)


STORE_INDEX = StoreIndexMode()
