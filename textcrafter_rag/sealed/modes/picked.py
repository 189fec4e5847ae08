"""What the two index modes share: the application's index picks the records, the store only reads them by id.

The store holds each record under a keyed random unit vector of its id (unrelated to the text), so it has
nothing to rank; a query sends it ids only. Writes go index first (add) and store first (delete), so a crash
never leaves a stored record that no search finds (:mod:`~textcrafter_rag.sealed.index_modes`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from ...errors import InvalidInputError
from ..engine import Found, Picked, Query, ReadIds, SearchCore, Steps

__all__ = ["PickedSearch"]


class PickedSearch:
    """The application's index picks the ids (or the caller names them: ``ids``), the store reads them by id,
    unless the replica holds them; ``keep`` then restricts what was read (for example to some documents)
    before anything is opened. An entry whose record did not come back is counted, never removed."""

    answered_by = "engine"
    seals_vectors = True
    keeps_index = True
    ranks_in_store = False

    def store_vectors(
        self, core: SearchCore, clean: np.ndarray, record_ids: Sequence[Any], seeds: Sequence[bytes | None] | None
    ) -> np.ndarray:
        """Keyed random unit vectors of the record ids: the store has nothing to rank."""
        return core.id_vectors(record_ids, clean.shape[1])

    def store_query(self, core: SearchCore, query: np.ndarray) -> np.ndarray:
        """A keyed random vector (a store search, when the adapter makes one, ranks nothing of the query)."""
        return core.keyed_vectors(["query"], query.shape[1])

    def find(self, core: SearchCore, query: Query) -> Steps:
        if query.store_args:
            raise InvalidInputError(
                f"an index mode ranks in this process and passes nothing to the store: {list(query.store_args)} "
                "cannot be applied. Filter the opened records, or search with candidates (search=TwoStageSearch()), "
                "which filters in the store and leaves it noised vectors to compare (SECURITY.md)"
            )
        picked = query.ids is None
        if not picked:
            plan = Picked(list(query.ids or ()))
        else:  # nothing kept out after the read: an exact index reads little more than k (IndexModes.plan)
            need = query.k if query.keep is None else None
            plan = core.index_plan(query.clean, need=need, probing=query.records is not None)
        wanted = plan.ids
        if plan.log_ids:  # the log's last read made with the records' (one request; never with a replica): _settled
            wanted, hits = yield from self._settled(plan, query, list((yield ReadIds(wanted + plan.log_ids))))
        else:
            hits = yield from self._read(core, wanted)
        if picked:
            core.count_dead(wanted, len(hits))
        if query.keep is not None:
            hits = query.keep(hits)
        opened = core.open_hits(query.fields(hits))
        # entries whose records are gone: read the rest of the pick. Not when nothing came back: a store that answers
        # empty answers so for the whole pick too (a read of all of it would have returned nothing either)
        rest: list[str] = []
        if plan.more is not None and hits and len(opened.record_ids) < query.k:
            read = set(wanted)
            rest = [i for i in plan.more() if i not in read]
        if rest:
            extra = yield from self._read(core, rest)
            core.count_dead(rest, len(extra))
            hits += extra
            opened = core.open_hits(query.fields(hits))
        return Found(hits, opened.positions, opened.record_ids, opened.vectors)

    @staticmethod
    def _read(core: SearchCore, ids: list[str]) -> Generator[ReadIds, Sequence[Any], list[Any]]:
        """The records of ``ids``: the replica's (``StoreIndexSearch(replica=True)``: the store reads none), else one
        read by id (none for no ids)."""
        local = core.index_records(ids)
        if local is not None:
            return list(local)
        return list((yield ReadIds(ids))) if ids else []

    @staticmethod
    def _settled(
        plan: Picked, query: Query, got: list[Any]
    ) -> Generator[ReadIds, Sequence[Any], tuple[list[str], list[Any]]]:
        """The ids and records to rank once the log's records read with the records are applied: those read, or
        where the log had news (a segment past a head), the index's new pick, reading those not read yet."""
        assert query.records is not None and plan.settle is not None
        log_ids = set(plan.log_ids)
        records = query.records(got)
        again = plan.settle([r for r in records if r is not None and r.id in log_ids])
        data = [(h, r.id if r is not None else None) for h, r in zip(got, records, strict=True)]
        data = [(h, i) for h, i in data if i not in log_ids]
        if again is None:
            return plan.ids, [h for h, _ in data]
        keep, read = set(again), {i for _, i in data}
        missing = [i for i in again if i not in read]
        more = list((yield ReadIds(missing))) if missing else []
        return again, [h for h, i in data if i in keep] + more

    def settle(self, core: SearchCore, dim: int | None) -> None:
        """Nothing to learn from the marker (the store-held index overrides this)."""
