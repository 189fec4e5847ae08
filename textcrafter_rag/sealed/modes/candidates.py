"""Candidate search: the store ranks heavily noised, key-rotated vectors; the application re-ranks exactly.

The store receives a candidate vector per record (:meth:`~textcrafter_rag.sealed.candidates.TwoStage.protect_documents`)
and a protected query, and returns candidates in rounds (:mod:`~textcrafter_rag.sealed.rounds`) until the recall
rule is met or ``open_k`` records were read; the application opens their sealed clean vectors and ranks them. An
attacker who can have its own texts stored can compare them with the candidate vectors (see SECURITY.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..candidates import DEFAULT_SEARCH, TwoStageSearch
from ..engine import Found, Query, SearchCore, SearchStore, Steps

__all__ = ["CANDIDATES", "CandidateSearch"]


class CandidateSearch:
    """The store ranks a protected query vector; the records it returns are opened and re-ranked exactly, in
    rounds until the recall rule is met or ``open_k`` records were read (a query's ``ids`` and ``keep`` do not
    apply: a candidate search filters in the store)."""

    name = "candidates"
    options_type = TwoStageSearch
    answered_by = "engine"
    seals_vectors = True
    keeps_index = False
    ranks_in_store = True
    parallel_writers = True

    def store_vectors(
        self, core: SearchCore, clean: np.ndarray, record_ids: Sequence[Any], seeds: Sequence[bytes | None] | None
    ) -> np.ndarray:
        """Each record's candidate vector (a copy's drawn with its source's ``seeds``: not a second draw)."""
        return core.candidate_vectors(clean, seeds)

    def store_query(self, core: SearchCore, query: np.ndarray) -> np.ndarray:
        """The protected, key-rotated query vector."""
        return core.candidate_query(query)

    def find(self, core: SearchCore, query: Query) -> Steps:
        protected = core.store_query(query.clean)[0].tolist()
        rounds = core.rounds(query.clean, query.k, query.fields)
        while rounds.size is not None:
            rounds.take((yield SearchStore(protected, rounds.size)))
        return Found(rounds.hits, rounds.positions, rounds.record_ids, rounds.vectors)

    def settle(self, core: SearchCore, dim: int | None) -> None:
        """Nothing to learn from the marker."""

    def reopened(self) -> TwoStageSearch:
        """The options a store written in this mode is opened with when the caller names none: the rounds."""
        return DEFAULT_SEARCH


CANDIDATES = CandidateSearch()
