"""Single-stage search: the store ranks the protected vectors itself, and its own search answers.

The store holds each record under the vector of the caller's protected embeddings
(:class:`~textcrafter_rag.adapters.ProtectedEmbeddings`), texts and named metadata sealed. No clean vector is
sealed into the record and the application re-ranks nothing, so the adapters hand every search to the wrapped
store's own (its scores, its MMR) and only open the hits. What the store learns is what the mechanism leaves in
each protected vector: the weakest of the modes against a store-side attacker (see SECURITY.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...errors import InvalidInputError
from ..engine import Query, SearchCore, Steps

__all__ = ["SINGLE_STAGE", "SingleStage", "SingleStageSearch"]


@dataclass(frozen=True)
class SingleStageSearch:
    """The options of single-stage search (there are none: the store's own search answers ``k`` hits).

    ``open_k`` is the cap every mode's options carry; here nothing is opened beyond the ``k`` the store returns.
    """

    open_k: ClassVar[int] = 1 << 31


class SingleStage:
    """The single-stage mode: the wrapped store's own search answers (:attr:`answered_by`)."""

    name = "single"
    options_type = SingleStageSearch
    #: The wrapped store\'s own search answers: the adapters\' readers ask it and open its hits.
    answered_by = "store"
    #: Records carry a sealed clean vector the application opens and ranks by.
    seals_vectors = False
    #: The application keeps an index of the records (written before the store, searched instead of it).
    keeps_index = False
    #: The store receives a query vector (single-stage: the protected query the wrapped store embeds).
    ranks_in_store = True
    #: Each process writes its own records (no index).
    parallel_writers = True

    def store_vectors(
        self, core: SearchCore, clean: np.ndarray, record_ids: Sequence[Any], seeds: Sequence[bytes | None] | None
    ) -> np.ndarray:
        """The vectors given: in single-stage they are the protected embeddings' own."""
        return clean

    def store_query(self, core: SearchCore, query: np.ndarray) -> np.ndarray:
        """Never asked: the wrapped store embeds the query with the protected embeddings."""
        raise InvalidInputError("single-stage search: the wrapped store's own search answers, with its own query")

    def find(self, core: SearchCore, query: Query) -> Steps:
        """Never asked: the wrapped store's own search answers (see :attr:`answered_by`)."""
        raise InvalidInputError("single-stage search: the wrapped store's own search answers")

    def settle(self, core: SearchCore, dim: int | None) -> None:
        """Nothing to learn from the marker."""

    def reopened(self) -> SingleStageSearch:
        """The options a store written in this mode is opened with when the caller names none."""
        return SingleStageSearch()


SINGLE_STAGE = SingleStage()
