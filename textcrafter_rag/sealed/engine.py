"""One sealed search, written once for every adapter, sync and async: what the store is asked, in each mode.

A mode's search is a generator of *requests* (:class:`SearchStore`: the store's best ``k`` for a vector;
:class:`ReadIds`: these records by id) that receives each answer and returns what to rank (:class:`Found`).
It does no I/O itself, so one algorithm serves both frameworks and both calling conventions: :func:`run` answers
the requests with an adapter's sync calls, :func:`arun` with its async ones (each step of the algorithm,
which may read the store-held index's log, runs in a worker thread, off the event loop).

The modes (:data:`MODES`, looked up by the core's mode name):

* ``"candidates"`` (:class:`CandidateSearch`): the store ranks a heavily noised, key-rotated query vector, in
  rounds until the recall rule is met or ``open_k`` records were read;
* ``"index"`` and ``"store-index"`` (:class:`IndexSearch`): the application's index picks ``open_k`` ids and the
  store reads them by id (or the replica holds them: then the store is asked nothing).

Single-stage search is the store's own and passes through the adapters untouched.

Before either, a process reads the store's marker record (:func:`settle_marker`), which names the mode the store
was written in, and a new store is marked at its first write (:func:`marker_record`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..sealed_records import ID_FIELD, IDS_KEY
from .layout import DIM_KEY, MARKER_KEY, MODE_KEY
from .marker import check_marker_mode

__all__ = [
    "MODES",
    "CandidateSearch",
    "Found",
    "IndexSearch",
    "MarkedCore",
    "Query",
    "ReadIds",
    "SearchCore",
    "SearchMode",
    "SearchStore",
    "arun",
    "marker_record",
    "run",
    "settle_marker",
]

H = TypeVar("H")
#: What the core opens of each hit: ``(store id, stored _tc_id, sealed vector, mode, sealed text)``.
HitFields = Callable[[Sequence[Any]], list[tuple[Any, Any, Any, Any, Any]]]


@dataclass(frozen=True)
class SearchStore:
    """Ask the store for its best ``k`` records for ``vector`` (a protected query: never a clean one)."""

    vector: list[float]
    k: int


@dataclass(frozen=True)
class ReadIds:
    """Read these records by their store ids (missing ones are left out of the answer)."""

    ids: list[str]


@dataclass(frozen=True)
class Found(Generic[H]):
    """What a search read and opened: every hit, and the positions, record ids and clean vectors of the opened."""

    hits: list[H]
    positions: list[int]
    record_ids: list[str]
    vectors: np.ndarray


@dataclass(frozen=True)
class Query:
    """One search: the clean query (it never leaves the process), ``k``, what the core opens of each hit, and
    for the index modes the ids to read in place of the index's pick (``ids``) and what of them to keep."""

    clean: np.ndarray
    k: int
    fields: HitFields
    ids: list[str] | None = None
    keep: Callable[[list[Any]], list[Any]] | None = None


#: A mode's search: requests out, answers in, :class:`Found` at the end.
Steps = Generator[SearchStore | ReadIds, Sequence[Any], Found[Any]]


class SearchCore(Protocol):
    """What a mode asks of the core (:class:`~textcrafter_rag.sealed_search.SealedSearch`)."""

    def store_query(self, clean: Any) -> np.ndarray: ...

    def rounds(self, query: Any, k: int, fields: HitFields) -> Any: ...

    def index_candidates(self, query: Any) -> list[str]: ...

    def index_records(self, ids: Sequence[str]) -> list[Any] | None: ...

    def count_dead(self, asked: Sequence[Any], returned: int) -> None: ...

    def open_hits(self, hits: Sequence[tuple[Any, Any, Any, Any, Any]], *, require_one: bool = True) -> Any: ...


class SearchMode(Protocol):
    """One sealed-search mode: the requests a search makes, in order."""

    #: Whether the store receives a query vector (candidate search) or only ids (the index modes).
    ranks_in_store: bool

    def find(self, core: SearchCore, query: Query) -> Steps: ...


class CandidateSearch:
    """The store ranks a protected query vector; the records it returns are opened and re-ranked exactly, in
    rounds until the recall rule is met or ``open_k`` records were read (a query's ``ids`` and ``keep`` do not
    apply: a candidate search filters in the store)."""

    ranks_in_store = True

    def find(self, core: SearchCore, query: Query) -> Steps:
        protected = core.store_query(query.clean)[0].tolist()
        rounds = core.rounds(query.clean, query.k, query.fields)
        while rounds.size is not None:
            rounds.take((yield SearchStore(protected, rounds.size)))
        return Found(rounds.hits, rounds.positions, rounds.record_ids, rounds.vectors)


class IndexSearch:
    """The application's index picks the ids (or the caller names them: ``ids``), the store reads them by id,
    unless the replica holds them; ``keep`` then restricts what was read (for example to some documents)
    before anything is opened. An entry whose record did not come back is counted, never removed."""

    ranks_in_store = False

    def find(self, core: SearchCore, query: Query) -> Steps:
        picked = query.ids is None
        wanted = core.index_candidates(query.clean) if query.ids is None else list(query.ids)
        local = core.index_records(wanted)  # the replica's (StoreIndexSearch(replica=True)): the store reads none
        hits = list(local) if local is not None else (list((yield ReadIds(wanted))) if wanted else [])
        if picked:
            core.count_dead(wanted, len(hits))
        if query.keep is not None:
            hits = query.keep(hits)
        opened = core.open_hits(query.fields(hits))
        return Found(hits, opened.positions, opened.record_ids, opened.vectors)


#: Every mode whose search the core runs, by the core's mode name.
MODES: dict[str, SearchMode] = {"candidates": CandidateSearch(), "index": IndexSearch(), "store-index": IndexSearch()}


def run(
    steps: Steps,
    *,
    search: Callable[[list[float], int], Sequence[Any]],
    read: Callable[[list[str]], Sequence[Any]],
) -> Found[Any]:
    """Run a mode's search with an adapter's sync calls."""
    try:
        request = next(steps)
        while True:
            answer = search(request.vector, request.k) if isinstance(request, SearchStore) else read(request.ids)
            request = steps.send(answer)
    except StopIteration as done:
        return done.value


async def arun(
    steps: Steps,
    *,
    search: Callable[[list[float], int], Awaitable[Sequence[Any]]],
    read: Callable[[list[str]], Awaitable[Sequence[Any]]],
) -> Found[Any]:
    """Run a mode's search with an adapter's async calls; the algorithm's own steps run in a worker thread."""
    sentinel = object()

    def step(answer: Any) -> Any:
        try:
            return next(steps) if answer is sentinel else steps.send(answer)
        except StopIteration as done:
            return _Done(done.value)

    request = await asyncio.to_thread(step, sentinel)
    while not isinstance(request, _Done):
        answer = await (search(request.vector, request.k) if isinstance(request, SearchStore) else read(request.ids))
        request = await asyncio.to_thread(step, answer)
    return request.value


@dataclass(frozen=True)
class _Done:
    value: Found[Any]


# -- the marker record ---------------------------------------------------------------------------------


class MarkedCore(Protocol):
    """What the marker steps ask of the core (:class:`~textcrafter_rag.sealed_search.SealedSearch`)."""

    mode: str
    marker_seen: bool

    def marker_text(self) -> str: ...

    def keyed_vectors(self, labels: Sequence[str], dim: int) -> np.ndarray: ...

    def store_index(self, dim: int | None = None) -> Any: ...


def settle_marker(core: MarkedCore | None, written: str | None, fields: Mapping[str, Any] | None) -> None:
    """Check the mode a store's marker names (``written``: its sealed mode, ``None`` without one) against the
    mode this process opened it in (``core``: ``None`` for single-stage), and tell the core what it says.

    Raises:
        ModeMismatchError: The store was written in another mode; nothing was sent to it.
    """
    check_marker_mode(core.mode if core is not None else "single", written)
    if written is None or core is None:
        return
    core.marker_seen = True
    dim = str((fields or {}).get(DIM_KEY, ""))
    if core.mode == "store-index" and dim.isdigit():
        core.store_index(int(dim))  # a process that deletes before it adds or searches knows the index's dimension


def marker_record(
    core: MarkedCore, marker_id: str, *, ids_scheme: str, dim: int
) -> tuple[str, dict[str, Any], list[float]]:
    """A new store's marker record: its sealed text, its plain fields and its keyed vector."""
    fields = {
        ID_FIELD: marker_id,
        MARKER_KEY: core.mode,
        MODE_KEY: core.mode,
        IDS_KEY: ids_scheme,
        DIM_KEY: str(dim),
    }
    return core.marker_text(), fields, core.keyed_vectors(["marker"], dim)[0].tolist()
