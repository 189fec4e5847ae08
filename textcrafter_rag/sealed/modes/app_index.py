"""The app-side index file: the application's index picks the records, and it lives in one process's file.

The index is persisted sealed to a local file (:class:`~textcrafter_rag.sealed.app_index.IndexFile`), one writer
at a time: a second worker, a crash or a rolled-back file can lose records from search. The store-held index
(:mod:`.store_index`) keeps it in the store instead, which every process shares.
"""

from __future__ import annotations

from ..app_index import AppIndexSearch
from .picked import PickedSearch

__all__ = ["APP_INDEX", "AppIndexMode"]


class AppIndexMode(PickedSearch):
    """The app-side index file mode."""

    name = "index"
    options_type = AppIndexSearch
    #: The index file holds one writer at a time.
    parallel_writers = False

    def reopened(self) -> AppIndexSearch:
        """The options a store written in this mode is opened with when the caller names none (without its file
        a search then says which ``index_path`` to give; choosing it warns that the file serves one process)."""
        return AppIndexSearch()


APP_INDEX = AppIndexMode()
