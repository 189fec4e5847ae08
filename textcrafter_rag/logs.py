"""What the library tells whoever runs it: its one logger, and the counters of sealed searches a user can read.

A warning (``RecallCapWarning``, ``SkippedRecordsWarning``) is shown once per store object, which in a server
is once in total: it says that something happens, not how often. So every such event is also a record on the
``textcrafter_rag`` logger (:data:`logger`: INFO for each capped search or skipped batch, WARNING where the user
must act), and a count in :class:`SearchStats`, which both adapters' stores expose as ``store.stats``. Messages
never carry a text, a vector, a key or a record id.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["SearchCounters", "SearchCounts", "SearchStats", "logger"]

#: The library's one logger: capped searches, skipped records, dead index entries, repairs.
logger = logging.getLogger("textcrafter_rag")


@dataclass(frozen=True)
class SearchStats:
    """A snapshot of one sealed store's counters since it was built (``store.stats``; zeros in single-stage).

    Attributes:
        searches: Sealed searches that asked the store (candidates) or the index (index modes) for records.
        capped_searches: Candidate searches that stopped at ``open_k`` short of their recall target.
        dead_entries_skipped: Index entries a search read whose records the store did not return.
        records_skipped: Records that did not open (another tenant, edited, no sealed vector), passed over.
    """

    searches: int = 0
    capped_searches: int = 0
    dead_entries_skipped: int = 0
    records_skipped: int = 0


class SearchCounts:
    """The counters one store object keeps (thread-safe): searches and skipped records; :meth:`snapshot` reads them."""

    def __init__(self) -> None:
        self.searches = 0
        self.skipped = 0
        self._lock = threading.Lock()

    def search(self) -> None:
        """Count one search."""
        with self._lock:
            self.searches += 1

    def skip(self) -> bool:
        """Count one skipped record; whether it is the first (the one that warns)."""
        with self._lock:
            self.skipped += 1
            return self.skipped == 1

    def snapshot(self, *, capped: int, dead: int) -> SearchStats:
        """The counters now, with the ones other parts keep (capped searches, dead index entries)."""
        with self._lock:
            return SearchStats(self.searches, capped, dead, self.skipped)


class SearchCounters:
    """The counters a sealed store shows its user, read from its core search (``_search``; ``None``: single-stage).

    One definition for both adapters' stores, which inherit it.
    """

    _search: Any

    @property
    def skipped(self) -> int:
        """Records skipped so far because they did not open (another tenant under this key, edited, no vector)."""
        return self._search.skipped if self._search is not None else 0

    @property
    def capped(self) -> int:
        """Searches that reached ``open_k`` before their recall target (``TwoStageSearch(recall=...)``) was met."""
        return self._search.capped if self._search is not None else 0

    @property
    def stats(self) -> SearchStats:
        """Searches, capped searches, dead index entries and skipped records so far (zeros in single-stage).

        Each capped search and each skipped batch is also a record on the ``textcrafter_rag`` logger (INFO).
        """
        return self._search.stats if self._search is not None else SearchStats()
