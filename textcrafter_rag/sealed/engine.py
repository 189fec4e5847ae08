"""One sealed search, written once for every adapter, sync and async: what the store is asked, in each mode.

A mode's search is a generator of *requests* (:class:`SearchStore`: the store's best ``k`` for a vector;
:class:`ReadIds`: these records by id) that receives each answer and returns what to rank (:class:`Found`).
A write is one too (:func:`add_records`, :func:`delete_records`: the index's steps around one :class:`Write`,
the adapter's own add or delete of the sealed records), so the order that loses no record is written once.
Neither does I/O itself, so one algorithm serves both frameworks and both calling conventions: :func:`run`
answers the requests with an adapter's sync calls, :func:`arun` with its async ones (each step of the
algorithm, which may read the store-held index's log, runs in a worker thread, off the event loop).

The modes are one file each under :mod:`.modes` (the registry, :data:`~.modes.MODES`), each a
:class:`SearchMode`: what the store receives for a record and a query, and the search's requests:

* ``"store-index"`` (the default) and ``"index"`` (the app-side index file): the application's index picks
  ``open_k`` ids and the store reads them by id (or the replica holds them: then the store is asked nothing);
* ``"candidates"``: the store ranks a heavily noised, key-rotated query vector, in rounds until the recall rule
  is met or ``open_k`` records were read;
* ``"single"``: the store's own search answers (``answered_by == "store"``): the adapters' readers hand it the
  query and open the hits.

Before either, a process reads the store's marker record (:func:`settle_marker`), which names the mode the store
was written in, and a new store is marked at its first write (:func:`marker_record`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from .layout import DIM_KEY, MARKER_KEY, MODE_KEY
from .marker import check_marker_mode
from .port import PortRecord
from .records import ID_FIELD, IDS_KEY

__all__ = [
    "Found",
    "Write",
    "WriteSteps",
    "add_records",
    "clear_records",
    "delete_records",
    "MarkedCore",
    "Picked",
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
class Write:
    """Write to the store now: the adapter's own add or delete of the sealed records (its answer is returned)."""


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
    for the index modes the ids to read in place of the index's pick (``ids``) and what of them to keep.

    ``store_args`` names the filters and store arguments the caller passed: a mode whose store ranks (candidates)
    has the adapter pass them with each store search; an index mode refuses them, since it asks the store
    nothing they could apply to (never ignored).
    """

    clean: np.ndarray
    k: int
    fields: HitFields
    ids: list[str] | None = None
    keep: Callable[[list[Any]], list[Any]] | None = None
    store_args: tuple[str, ...] = ()
    #: How the adapter's hits read as the store's records (``None`` for a hit without an id), so that the log's
    #: last read is made with the records' (:class:`Picked`); ``None``: the log is read on its own.
    records: Callable[[Sequence[Any]], list[PortRecord | None]] | None = None


@dataclass(frozen=True)
class Picked:
    """The index's pick for one search (:meth:`SearchCore.index_plan`): the record ids to read, and the log's ids
    to read in the same request (the store-held index's last read of its log; none: ``log_ids`` empty).

    ``settle`` takes the log's records that came back (every one of ``log_ids`` the store holds): it applies
    them, and returns the ids to read in place of ``ids`` when they changed the index (``None``: unchanged).
    ``more`` gives the whole ``open_k`` pick, best first, where ``ids`` is a narrower one (an exact index): read
    the rest of it only when some, but fewer records than the search keeps, came back.
    """

    ids: list[str]
    log_ids: list[str] = field(default_factory=list)
    settle: Callable[[Sequence[PortRecord]], list[str] | None] | None = None
    more: Callable[[], list[str]] | None = None


#: A mode's search: requests out, answers in, :class:`Found` at the end.
Steps = Generator[SearchStore | ReadIds, Sequence[Any], Found[Any]]
#: A write: one :class:`Write` out, the store's answer in, and back.
WriteSteps = Generator[Write, Any, Any]


class SearchCore(Protocol):
    """What a mode asks of the core (:class:`~textcrafter_rag.sealed.core.SealedSearch`)."""

    def store_query(self, clean: Any) -> np.ndarray: ...

    def candidate_vectors(self, clean: np.ndarray, seeds: Sequence[bytes | None] | None) -> np.ndarray: ...

    def candidate_query(self, query: np.ndarray) -> np.ndarray: ...

    def id_vectors(self, record_ids: Sequence[Any], dim: int) -> np.ndarray: ...

    def keyed_vectors(self, labels: Sequence[str], dim: int) -> np.ndarray: ...

    def store_index(self, dim: int | None = None) -> Any: ...

    def rounds(self, query: Any, k: int, fields: HitFields) -> Any: ...

    def index_candidates(self, query: Any) -> list[str]: ...

    def index_plan(self, query: Any, *, need: int | None = None, probing: bool = True) -> Picked: ...

    def index_records(self, ids: Sequence[str]) -> list[Any] | None: ...

    def count_dead(self, asked: Sequence[Any], returned: int) -> None: ...

    def open_hits(self, hits: Sequence[tuple[Any, Any, Any, Any, Any]], *, require_one: bool = True) -> Any: ...


class SearchMode(Protocol):
    """One sealed-search mode (one file under :mod:`.modes`): what the store receives, and a search's requests."""

    #: The name records and the marker carry (``_tc_mode``).
    name: str
    #: The options class that selects this mode (``search=`` in both adapters).
    options_type: type
    #: Who answers a search: ``"engine"`` (this mode's :meth:`find`, the hits opened and ranked in the process)
    #: or ``"store"`` (single-stage: the wrapped store's own search, whose hits the adapter opens). Each adapter
    #: looks its reader up by this name, once per mode; nothing else in an adapter depends on the mode.
    answered_by: str
    #: Records carry their clean vector sealed (``_tc_vec``), which the application opens and ranks by.
    seals_vectors: bool
    #: The application keeps an index: written before the store on add, after it on delete; read by id.
    keeps_index: bool
    #: Whether the store receives a query vector (single-stage and candidates) or only ids (the index modes).
    ranks_in_store: bool
    #: Whether processes may write at once, each on its own (not the app-side index: one process's file).
    parallel_writers: bool

    def store_vectors(
        self, core: SearchCore, clean: np.ndarray, record_ids: Sequence[Any], seeds: Sequence[bytes | None] | None
    ) -> np.ndarray: ...

    def store_query(self, core: SearchCore, query: np.ndarray) -> np.ndarray: ...

    def find(self, core: SearchCore, query: Query) -> Steps: ...

    def settle(self, core: SearchCore, dim: int | None) -> None: ...

    def reopened(self) -> Any: ...


class WritingCore(Protocol):
    """What a write asks of the core (:class:`~textcrafter_rag.sealed.core.SealedSearch`): nothing without an index."""

    search_mode: SearchMode

    def index_add(self, record_ids: Sequence[Any], clean: Any) -> None: ...

    def index_stored(self, record_ids: Sequence[Any], clean: Any) -> None: ...

    def index_remove(self, record_ids: Sequence[Any]) -> int: ...

    def before_clear(self) -> Any: ...

    def cleared(self, state: Any) -> None: ...


def add_records(core: WritingCore, record_ids: Sequence[Any], clean: np.ndarray | None) -> WriteSteps:
    """One add, in the order that leaves no stored record unindexed: the index entries (the index modes), the
    records (:class:`Write`), then the log read again (an entry a racing delete removed is logged again).
    ``clean``: the records' clean vectors (``None`` in single-stage, which keeps no index)."""
    core.index_add(record_ids, clean)
    answer = yield Write()
    core.index_stored(record_ids, clean)
    return answer


def delete_records(
    core: WritingCore,
    record_ids: Sequence[Any],
    *,
    listed: Callable[[], Sequence[Any]] | None = None,
    settle: Callable[[], Any] | None = None,
) -> WriteSteps:
    """One delete: the records (:class:`Write`), then their tombstones and the records read back (the index
    modes: one a racing add stored again is logged again).

    Where the mode keeps an index, and only there (the other modes spare the store these reads): ``listed``
    gives the store ids a delete named by something other than ids (a source document, a filter) removes, read
    before the write; ``settle`` reads the store's marker first (the index's dimension, for a process that
    deletes before it adds or searches).
    """
    ids = list(record_ids)
    if core.search_mode.keeps_index:
        ids = ids or (list(listed()) if listed is not None else [])
        if ids and settle is not None:
            settle()
    answer = yield Write()
    if ids:
        core.index_remove(ids)
    return answer


def clear_records(core: WritingCore, *, settle: Callable[[], Any] | None = None) -> WriteSteps:
    """One clear: what the index must know first (where the mode keeps one, ``settle`` reads the store's marker:
    its dimension), the store cleared (:class:`Write`), then the index forgets every id it held (the store-held
    index starts a new epoch of its log, which every other process follows at its next read)."""
    if settle is not None and core.search_mode.keeps_index:
        settle()
    state = core.before_clear()
    answer = yield Write()
    core.cleared(state)
    return answer


def _sync_call(request: Any, search: Any, read: Any, write: Any) -> Any:
    if isinstance(request, SearchStore):
        return search(request.vector, request.k)
    return read(request.ids) if isinstance(request, ReadIds) else write()


def run(
    steps: Steps | WriteSteps,
    *,
    search: Callable[[list[float], int], Sequence[Any]] | None = None,
    read: Callable[[list[str]], Sequence[Any]] | None = None,
    write: Callable[[], Any] | None = None,
) -> Any:
    """Run a mode's search, or a write, with an adapter's sync calls (those its requests need)."""
    try:
        request = next(steps)
        while True:
            request = steps.send(_sync_call(request, search, read, write))
    except StopIteration as done:
        return done.value


async def arun(
    steps: Steps | WriteSteps,
    *,
    search: Callable[[list[float], int], Awaitable[Sequence[Any]]] | None = None,
    read: Callable[[list[str]], Awaitable[Sequence[Any]]] | None = None,
    write: Callable[[], Awaitable[Any]] | None = None,
) -> Any:
    """Run a mode's search, or a write, with an adapter's async calls; the algorithm's own steps run in a worker
    thread."""
    sentinel = object()

    def step(answer: Any) -> Any:
        try:
            return next(steps) if answer is sentinel else steps.send(answer)
        except StopIteration as done:
            return _Done(done.value)

    request = await asyncio.to_thread(step, sentinel)
    while not isinstance(request, _Done):
        answer = await _sync_call(request, search, read, write)  # the adapter's coroutine, awaited here
        request = await asyncio.to_thread(step, answer)
    return request.value


@dataclass(frozen=True)
class _Done:
    value: Any


# -- the marker record ---------------------------------------------------------------------------------


class MarkedCore(Protocol):
    """What the marker steps ask of the core (:class:`~textcrafter_rag.sealed.core.SealedSearch`)."""

    mode: str
    search_mode: SearchMode
    marker_seen: bool

    def marker_text(self) -> str: ...

    def keyed_vectors(self, labels: Sequence[str], dim: int) -> np.ndarray: ...


def settle_marker(core: MarkedCore, written: str | None, fields: Mapping[str, Any] | None) -> None:
    """Check the mode a store's marker names (``written``: its sealed mode, ``None`` without one) against the
    mode this process opened it in, and tell the core what it says.

    Raises:
        ModeMismatchError: The store was written in another mode; nothing was sent to it.
    """
    check_marker_mode(core.mode, written)
    if written is None:
        return
    core.marker_seen = True
    dim = str((fields or {}).get(DIM_KEY, ""))
    core.search_mode.settle(core, int(dim) if dim.isdigit() else None)  # type: ignore[arg-type]


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
