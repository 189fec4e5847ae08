"""Timing the application's work on real sealed records: a pool sealed once, opened as a mode opens."""

from __future__ import annotations

import uuid

import numpy as np

from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.candidates import TwoStage
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.rounds import OpenedHits

from .rounds import timed_ms

__all__ = ["SealedPool"]


class SealedPool:
    """Real sealed vectors to open while timing: a pool sealed once, opened as many at a time as a mode opens.

    Each vector is bound to its record's sealed text (here a stand-in string of a sealed note's length).
    """

    def __init__(self, search: SealedSearch, clean: np.ndarray, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        rows = clean[rng.choice(len(clean), n, replace=len(clean) < n)]
        self.ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)]
        self.texts = [rng.bytes(192).hex() for _ in range(n)]
        self.tokens = [search.seal_vector(v, record_id=r, record_text=t) for v, r, t in zip(rows, self.ids, self.texts)]
        self.search = search

    def opened(self, count: int, search: SealedSearch) -> OpenedHits:
        """Open ``count`` sealed vectors with ``search`` (whose fetch_k or open_k is the mode setting's)."""
        hits = [(self.ids[p], None, self.tokens[p], search.mode, self.texts[p]) for p in range(count)]
        got = search.open_hits(hits)
        assert len(got.positions) == count, (len(got.positions), count)
        return got

    def open(self, count: int, search: SealedSearch) -> np.ndarray:
        """The clean vectors of :meth:`opened`."""
        return self.opened(count, search).vectors

    def time_rounds_app(self, query: np.ndarray, count: int, search: SealedSearch, two: TwoStage) -> float:
        """Milliseconds of a recall-target search's app work for ``count`` records read: protect the query, open
        them, rebuild their store scores from the sealed seeds (the stopping rule's input), rank.

        ``search`` opens (its ``fetch_k`` at least ``count``); ``two`` is the same key's candidate construction.
        """

        def work() -> None:
            search.store_query(query)
            got = self.opened(count, search)
            unit = unit_rows(got.vectors.astype(np.float64))
            _ = two.noised(unit, got.seeds, two.search.doc_strength) @ two.query_unit(query)
            SealedSearch.rank(query, got.vectors, 10)

        return timed_ms(work)
