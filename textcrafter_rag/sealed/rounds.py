"""Candidate search in rounds: ask the store for more records until a better one is unlikely to remain.

A fixed ``open_k`` is sized by hand for one store size and quietly loses quality as the store grows
(``benchmarks/results/sealed_search.md``: 0.95 of clean NDCG@10 on SciFact, 0.60 at a million records, both at
``open_k=200``). With a recall target (``TwoStageSearch(recall=0.99)``) the application searches in rounds
(``first``, then doubling, up to ``open_k``) and stops on a rule that follows from the known noise model:

* The store ranks records by ``s = <q', c>``, the cosine of the noised query ``q' = unit(q + r_q v)`` and the
  record's candidate ``c = unit(x + r u)`` (the rotation keeps inner products). The application knows ``s`` for
  every record it opened: it holds ``q'``, and each record's sealed clean vector and noise seed.
* For a record it has not seen, with exact cosine ``t`` to the clean query, ``s = a t + e``: ``a = 1 / sqrt((1 +
  r^2)(1 + r_q^2))``, and ``e`` has standard deviation ``sigma`` (below) from the record's own random direction
  ``u`` (and the query's ``v``), independent of the text.
* After each round, ``tau`` is the lowest score among the records the store returned: a record it left
  scored below it. Each record of the current top ``k`` (exact cosine ``t``) would have scored above ``tau``
  with probability ``Phi((a t - tau) / sigma)``; the search stops when the mean of that over the current top
  ``k`` (the expected recall, with the app's best estimate of the true top ``k``) reaches ``recall``.

This is an estimate, not a bound: it is checked on held-out stores (``tests/test_candidate_rounds.py``:
clustered synthetic vectors; ``python -m benchmarks.sealed_search``: SciFact and SciFact grown by distractors).

Where the rule is not met at ``open_k``, the search stops there and says so: :attr:`Rounds.capped` (counted by
:class:`~textcrafter_rag.sealed.core.SealedSearch`, warned once per store, logged at INFO on the
``textcrafter_rag`` logger each time), never a silent loss. Records
sealed before the noise seed was sealed beside the vector count as unscored: a round with none scored cannot
stop early.

The store sees what it saw before, the same noised query, once per round with a growing ``k``: the number of
rounds tells it how hard the query was to answer, nothing more.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Generic, TypeVar

import numpy as np

from ..logs import logger
from ..numerics import unit_rows
from .candidates import TwoStage, TwoStageSearch

__all__ = [
    "FIRST_ROUND",
    "CapCounter",
    "HitFields",
    "OpenedHits",
    "RecallCapWarning",
    "Rounds",
    "SkippedRecordsWarning",
    "rule_met",
    "score_noise",
]

T = TypeVar("T")
#: ``(store id, stored _tc_id, sealed vector, mode, sealed text)`` of one hit, as ``SealedSearch.open_hits`` reads it.
HitFields = tuple[Any, Any, Any, Any, Any]
_NORMAL = NormalDist()
#: Records asked for in the first round (at least ``k``); each later round asks for twice as many.
FIRST_ROUND = 100


class SkippedRecordsWarning(UserWarning):
    """Some hits did not open and were skipped (counted in :attr:`SealedSearch.skipped`)."""


class RecallCapWarning(UserWarning):
    """A candidate search reached ``open_k`` before its recall target (counted in ``SealedSearch.capped``)."""


class CapCounter:
    """How many searches of one store stopped at ``open_k`` short of the rule; the first one warns."""

    def __init__(self, fetch_k: int) -> None:
        self.fetch_k = fetch_k
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        """Count a capped search: a log record each time (INFO: a server sees how often), a warning the first time."""
        with self._lock:
            self.count += 1
            count = self.count
        logger.info(
            "a candidate search stopped at open_k=%d short of its recall target (%d so far)", self.fetch_k, count
        )
        if count == 1:
            warnings.warn(
                f"a search reached open_k={self.fetch_k} before its recall target was met: raise open_k (or lower "
                "recall); SealedSearch.capped counts such searches",
                RecallCapWarning,
                stacklevel=6,
            )


@dataclass(frozen=True)
class OpenedHits:
    """Hits whose sealed vectors opened: their positions in the store's answer, ids and clean directions."""

    positions: list[int]
    record_ids: list[str]
    vectors: np.ndarray
    #: Each record's candidate noise seed (``None`` if sealed without one): the app can rebuild its store score.
    seeds: list[bytes | None]


def score_noise(*, doc_strength: float, query_strength: float, dim: int, t: float) -> tuple[float, float]:
    """``(a, sigma)``: a record of exact cosine ``t`` gets store score ``a t`` plus noise of deviation ``sigma``.

    ``sigma^2 = (r^2 + r_q^2 / (1 + r_q^2)) / (D (1 + r^2))`` from the record's and the query's random unit
    directions (each inner product with a fixed unit vector has variance ``1 / D``), plus the spread of the
    candidate's norm before it was made unit (relative deviation ``r / ((1 + r^2) sqrt(D))``).
    """
    r2, q2 = doc_strength**2, query_strength**2
    a = 1.0 / math.sqrt((1.0 + r2) * (1.0 + q2))
    direction = (r2 + q2 / (1.0 + q2)) / (dim * (1.0 + r2))
    norm = (a * t * doc_strength / ((1.0 + r2) * math.sqrt(dim))) ** 2
    return a, math.sqrt(direction + norm)


def rule_met(
    exact: np.ndarray, lowest: float | None, *, k: int, recall: float, search: TwoStageSearch, dim: int
) -> bool:
    """Whether a search may stop: the expected share of the current top ``k`` that the store would have returned
    by now is at least ``recall``.

    ``exact`` holds the exact cosines of the records opened so far, ``lowest`` the lowest store score of the last
    round's records (``None``: none could be scored, so it may not stop). A record of exact cosine ``t`` scores
    above ``lowest`` with probability ``Phi((a t - lowest) / sigma)`` (:func:`score_noise`); the rule averages
    that over the current top ``k``, which is the best estimate of the true top ``k`` the app holds.
    """
    if lowest is None or len(exact) < k:
        return False
    top = np.partition(np.asarray(exact, dtype=np.float64), -k)[-k:]
    found = 0.0
    for t in top:
        a, sigma = score_noise(
            doc_strength=search.doc_strength, query_strength=search.query_strength, dim=dim, t=float(t)
        )
        found += _NORMAL.cdf((a * float(t) - lowest) / sigma)
    return found / k >= recall


class Rounds(Generic[T]):
    """One query's rounds: ask the store for :attr:`size` records, :meth:`take` its answer, until :attr:`size` is None.

    Args:
        two_stage: The store's candidate construction (it rebuilds the scores the store gave).
        query: The clean query vector, validated as the store query was built from it.
        k: Hits wanted.
        fields: Reads the hit fields of the store's records.
        open_hits: Opens new hits: ``(positions, ids, vectors, seeds)``, the first call raising if none opens.
        cap: The most records asked for (``open_k``).
        recall: The target, or ``None`` for one round of ``cap`` records.
        first: The first round's size (at least ``k``).
        caps: Counts this search if it stops at ``cap`` with the rule not met.
    """

    def __init__(
        self,
        two_stage: TwoStage,
        query: np.ndarray,
        k: int,
        *,
        fields: Callable[[Sequence[T]], list[HitFields]],
        open_hits: Callable[[list[HitFields], bool], OpenedHits],
        cap: int,
        recall: float | None,
        first: int,
        caps: CapCounter | None = None,
    ) -> None:
        self._two = two_stage
        self._raw_query = np.asarray(query).reshape(-1)  # as the store query was built from it (same noise seed)
        self._query = unit_rows(np.asarray(query, dtype=np.float64).reshape(1, -1))[0]
        self._noised_query: np.ndarray | None = None
        self._k = k
        self._fields = fields
        self._open = open_hits
        self._cap = cap
        self._recall = recall
        self._caps = caps
        self.size: int | None = cap if recall is None else min(cap, max(first, k))
        #: Every record the store returned, in the order first seen.
        self.hits: list[T] = []
        #: Positions (in :attr:`hits`), ids and clean vectors of the records that opened.
        self.positions: list[int] = []
        self.record_ids: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._exact: list[float] = []
        self._store_score: dict[str, float] = {}
        self._seen: set[tuple[str, str]] = set()
        self._rid_of: dict[tuple[str, str], str] = {}
        #: Whether the search stopped at ``cap`` with the rule not met.
        self.capped = False
        #: Store calls made.
        self.rounds = 0

    @property
    def vectors(self) -> np.ndarray:
        """The opened records' clean vectors, in :attr:`positions` order."""
        if not self._vectors:
            return np.empty((0, len(self._query)), dtype=np.float32)
        return np.stack(self._vectors)

    def take(self, hits: Sequence[T]) -> None:
        """The store's answer to a request for :attr:`size` records: open the new ones, then decide."""
        asked = self.size
        assert asked is not None, "take() after the last round"
        self.rounds += 1
        fields = self._fields(hits)
        keys = [(str(f[0]), str(f[1])) for f in fields]  # one record, however often the store returns it
        new = [i for i, key in enumerate(keys) if key not in self._seen]
        self._seen.update(keys)
        opened = self._open([fields[i] for i in new], self.rounds == 1)
        positions, rids, vectors, seeds = opened.positions, opened.record_ids, opened.vectors, opened.seeds
        offset = len(self.hits)
        self.hits.extend(hits[i] for i in new)
        for p, rid in zip(positions, rids, strict=True):
            self._rid_of[keys[new[p]]] = rid
            self.positions.append(offset + p)
        self.record_ids.extend(rids)
        self._vectors.extend(vectors)
        if rids:
            self._exact.extend((unit_rows(np.asarray(vectors, dtype=np.float64)) @ self._query).tolist())
        self._score(rids, vectors, seeds)
        returned = [self._rid_of[key] for key in keys if key in self._rid_of]
        self.size = self._next(asked, returned=len(hits), returned_ids=returned)

    def _score(self, rids: list[str], vectors: np.ndarray, seeds: list[bytes | None]) -> None:
        """The store score of each newly opened record whose noise seed is known."""
        if self._recall is None or not rids:
            return
        search = self._two.search
        if self._noised_query is None:
            self._noised_query = self._two.query_unit(self._raw_query)
        candidates = self._two.noised(unit_rows(np.asarray(vectors, dtype=np.float64)), seeds, search.doc_strength)
        for rid, s in zip(rids, candidates @ self._noised_query, strict=True):
            if not math.isnan(s):
                self._store_score[rid] = float(s)

    def _next(self, asked: int, *, returned: int, returned_ids: list[str]) -> int | None:
        if self._recall is None or returned < asked:  # one fixed round, or the store has no more records
            return None
        if self._rule_met(returned_ids):
            return None
        if asked >= self._cap:
            self.capped = True
            if self._caps is not None:
                self._caps.add()
            return None
        return min(self._cap, 2 * asked)

    def _rule_met(self, returned_ids: list[str]) -> bool:
        # the lowest score among the returned records the app can score: at least the store's last one
        scored = [self._store_score[r] for r in set(returned_ids) & self._store_score.keys()]
        assert self._recall is not None
        return rule_met(
            np.asarray(self._exact),
            min(scored) if scored else None,
            k=self._k,
            recall=self._recall,
            search=self._two.search,
            dim=len(self._query),
        )
