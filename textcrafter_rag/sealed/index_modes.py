"""The two modes in which the application picks the records (the store ranks nothing), as one part of the core.

* ``"store-index"`` (:class:`~.store_index.StoreIndexSearch`): the index's sealed log lives in the store
  (:mod:`.log`), and every process rebuilds its FAISS cache from it;
* ``"index"`` (:class:`~textcrafter_rag.sealed.app_index.AppIndexSearch`): the index lives in one process's sealed file.

Writes go index first, store second (add), and store first, index second (delete), so a crash never leaves a
stored record that no search finds: at worst an entry whose record is missing, which a search skips and counts
(:attr:`IndexModes.dead`) and never removes, since a lagging or failing read must not delete.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..errors import InvalidInputError, InvalidTypeError, TextcrafterError
from ..logs import logger
from ..sealing import SealError, SecretKey
from ..validation import check_store_vectors
from .app_index import AppIndex, AppIndexSearch, IndexFile
from .engine import Picked
from .layout import is_library_record
from .port import PortRecord, RecordPort
from .record_ids import canonical_record_id
from .records import RecordSealer
from .replica import Fetch, HitFieldsOf, OpenVector, Replica, port_hit_fields
from .store_index import EXACT_EXTRA, StoreIndex, StoreIndexSearch

__all__ = [
    "IndexMissingError",
    "IndexModes",
    "Picked",
    "UnindexedRecordsWarning",
    "compact_store_index",
    "logger",
    "records_read",
]


def compact_store_index(indexes: IndexModes | None) -> bool:
    """Compact a store's store-held index now (``indexes``: its core's index side, ``None`` in candidate or
    single-stage search): store the index as one sealed snapshot, then delete the segments it covers; whether a
    snapshot was written (not while the codebook trains). A new process then opens the store from the snapshot
    and the segments past it. Compaction also runs by itself, in a background thread, every
    ``StoreIndexSearch(compact_every=...)`` entries a process writes; this call first waits for one in flight.

    Raises:
        InvalidInputError: The store does not use the store-held index.
    """
    if indexes is None or not indexes.held:
        raise InvalidInputError("compact_index() is for the store-held index (search=StoreIndexSearch())")
    held = indexes.store_index()
    return held.compact() if held is not None else False


def records_read(held: StoreIndex, k: int, need: int | None) -> int:
    """How many records a search of the store-held index ``held`` reads by id, of at most ``k``, when it keeps
    ``need`` of them (``None``: it filters what it read, so it reads ``k``): ``need`` plus :data:`EXACT_EXTRA` while
    the index is exact, once trained the options' ``open_k`` (unset: as many as the index's size needs,
    :mod:`.sizing`) and at least ``need``."""
    if need is None:
        return k
    if held.index.trained:
        return min(k, max(need, held.options.opened(len(held.index))))
    return min(k, need + EXACT_EXTRA)


class IndexMissingError(TextcrafterError, ValueError):
    """A store written with the app-side index is searched by a process that holds no index for it."""


class UnindexedRecordsWarning(UserWarning):
    """The store holds records but no index log under this key and tenant: the index cannot find them."""


class IndexModes:
    """The index side of a :class:`~textcrafter_rag.sealed.core.SealedSearch` in an index mode.

    Args:
        key: The store's key.
        tenant: The tenant.
        options: :class:`StoreIndexSearch` or :class:`AppIndexSearch`.
        lock: The owner's lock (one lock for one store object).
        open_vector: Opens a record's sealed clean vector (the replica checks fetched records against the log).
    """

    def __init__(
        self,
        key: SecretKey,
        *,
        tenant: str,
        options: StoreIndexSearch | AppIndexSearch,
        lock: threading.RLock,
        open_vector: OpenVector,
    ) -> None:
        self.options = options
        self.held = isinstance(options, StoreIndexSearch)
        self._key, self._tenant, self._lock = key, tenant, lock
        self._port: RecordPort | None = None
        self._store_index: StoreIndex | None = None
        self._index: AppIndex | None = None
        self._file: IndexFile | None = None
        if isinstance(options, AppIndexSearch) and options.index_path is not None:
            self._file = IndexFile(options.index_path, key=key, context=tenant)
        self._dead = 0
        self._warned = False
        self._open_vector = open_vector
        #: The local replica of the sealed records (``StoreIndexSearch(replica=True)``; from :meth:`attach` on).
        self.replica: Replica | None = None

    # -- the store-held index ----------------------------------------------------------------------

    def attach(self, port: RecordPort) -> None:
        """The store the store-held index keeps its log in (the adapter's :class:`RecordPort`)."""
        if not isinstance(port, RecordPort):
            raise InvalidTypeError(f"port must implement RecordPort, got {type(port).__name__}")
        self._port = port
        if isinstance(self.options, StoreIndexSearch) and self.options.replica:
            self.replica = Replica(fetch=port.get, fields=port_hit_fields, open_vector=self._open_vector)

    def replicate(self, fetch: Fetch, fields: HitFieldsOf) -> None:
        """Keep the replica's records as the adapter reads them by id (its framework objects), not as ports."""
        if self.replica is None:
            raise InvalidInputError("this store keeps no replica (StoreIndexSearch(replica=True) keeps one)")
        self.replica.use(fetch, fields)

    def records(self, ids: Sequence[str]) -> list[Any] | None:
        """The replica's records for these ids (a query then reads none from the store); ``None`` without one."""
        return self.replica.records(ids) if self.replica is not None else None

    def store_index(self, dim: int | None = None) -> StoreIndex | None:
        """The store-held index (built at first use with the vectors' dimension; ``None`` before)."""
        if not self.held:
            raise InvalidInputError("this store keeps its index in a local file, not in the store")
        with self._lock:
            if self._store_index is None and dim is not None:
                if self._port is None:
                    raise InvalidInputError("the store-held index needs the store: attach(port) first")
                assert isinstance(self.options, StoreIndexSearch)
                self._store_index = StoreIndex(
                    self._key, tenant=self._tenant, options=self.options, port=self._port, dim=dim
                )
                if self.replica is not None:
                    self._store_index.listeners.append(self.replica.apply)
                    self._store_index.resets.append(self.replica.reset)
            if self._store_index is not None and dim is not None and self._store_index.log.dim != dim:
                raise InvalidInputError(
                    f"vectors of dimension {dim} for an index of dimension {self._store_index.log.dim}"
                )
            return self._store_index

    def rebuild(
        self,
        open_records: Callable[[list[PortRecord]], tuple[list[str], np.ndarray]],
        *,
        batch_size: int,
        group: int,
        progress: bool,
        before: Callable[[], Any] | None,
    ) -> int:
        """Index every data record the store lists, opened ``group`` at a time by ``open_records`` (``before``
        first, once the mode is checked)."""
        if not self.held or self._port is None:
            raise InvalidInputError("rebuild_index() is for the store-held index (search=StoreIndexSearch())")
        if before is not None:
            before()
        total = 0
        with tqdm(desc="rebuilding the sealed index", unit="records", disable=not progress) as bar:
            for batch in self._port.enumerate(batch_size):
                data = [r for r in batch if not is_library_record(r.fields)]
                for start in range(0, len(data), group):
                    ids, vectors = open_records(data[start : start + group])
                    if ids:
                        held = self.store_index(vectors.shape[1])
                        assert held is not None
                        total += held.rebuild([(ids, vectors)])
                bar.update(len(batch))
        if self._store_index is not None:
            self._store_index.wait_compacted()  # a bulk job ends with its compaction done (a CLI exits next)
        logger.info("rebuilt the sealed index: %d records indexed", total)
        return total

    def compact(self) -> bool:
        """Compact the store-held index's log into a sealed snapshot now; whether one was written."""
        return compact_store_index(self)

    # -- the app-side index file -------------------------------------------------------------------

    def index(self, dim: int | None = None) -> AppIndex | None:
        """The app-side index (loaded from its file at first use; ``None`` before any record and file)."""
        if self.held:
            raise InvalidInputError("this store keeps its index in the store: see store_index()")
        with self._lock:
            if self._index is None:
                assert isinstance(self.options, AppIndexSearch)
                loaded = self._file.load(search=self.options) if self._file is not None else None
                if loaded is not None:
                    self._index = loaded
                elif dim is not None:
                    self._index = AppIndex(dim, search=self.options)
            if self._index is not None and dim is not None and self._index.dim != dim:
                raise InvalidInputError(f"vectors of dimension {dim} for an index of dimension {self._index.dim}")
            return self._index

    def save(self) -> None:
        """Write the app-side index to its file now (it is also written after every add and delete)."""
        if self.held:
            raise InvalidInputError("this store does not use the app-side index (search=AppIndexSearch(...))")
        if self._file is None:
            raise InvalidInputError("this store has no index_path: its index lives in this process only")
        index = self.index()
        if index is not None:
            with self._lock:
                self._file.save(index)

    # -- both --------------------------------------------------------------------------------------

    def before_clear(self) -> tuple[list[str], dict[str, int] | None]:
        """What a clear of the store needs to know first: the app-side index's ids, or every writer's head of
        the store-held index's log (read up to date, just before the store is cleared)."""
        if not self.held:
            index = self.index()
            return (index.ids() if index is not None else []), None
        held = self.store_index()
        return [], (held.log.heads() if held is not None else None)

    def cleared(self, state: tuple[list[str], dict[str, int] | None]) -> None:
        """After the store was cleared (``state``: :meth:`before_clear`'s): the index forgets what it held.

        The store-held index's log went with the store: this process starts a new epoch of it (an empty
        snapshot covering every writer's head before the clear), so every other process drops what it holds at
        its next read, and a writer that wrote before the clear writes on (:meth:`StoreIndex.cleared`).
        """
        ids, heads = state
        if self.held:
            held = self.store_index()
            if held is not None and heads is not None:
                held.cleared(heads)
        elif ids:
            self.remove(ids)

    def add(self, record_ids: Sequence[Any], clean: np.ndarray) -> None:
        """Add (or replace) records, *before* the store takes them (a record is never stored unindexed)."""
        ids = [canonical_record_id(r) for r in record_ids]
        if self.held:
            held = self.store_index(clean.shape[1])
            assert held is not None
            held.add(ids, clean)
            return
        index = self.index(clean.shape[1])
        assert index is not None and isinstance(self.options, AppIndexSearch)
        with self._lock:
            index.add(ids, clean)
            if self._file is not None and self.options.autosave:
                self._file.save(index)

    def stored(self, record_ids: Sequence[Any], clean: np.ndarray) -> None:
        """*After* the store took records the index logged: the store-held index reads the log and logs again
        those a racing delete from another process removed (:meth:`StoreIndex.confirm`); one process's file
        races nothing."""
        held = self.store_index(clean.shape[1]) if self.held else None
        if held is not None:
            held.confirm([canonical_record_id(r) for r in record_ids], clean)

    def remove(self, record_ids: Sequence[Any]) -> int:
        """Forget records, *after* the store deleted them; how many (the store-held index: how many logged).

        The store-held index then reads the records back: one another process stored again meanwhile (an add
        racing this delete: its entry logged before the tombstone, its store write after the store delete) is
        logged again, so the index holds what the store holds.
        """
        ids = [canonical_record_id(r) for r in record_ids]
        if self.held:
            held = self.store_index()
            if held is None:
                return 0  # nothing indexed, searched or marked in this process: no dimension for a log record yet
            held.remove(ids)
            self._index_again(held, ids)
            return len(ids)
        index = self.index()
        if index is None:
            return 0
        assert isinstance(self.options, AppIndexSearch)
        with self._lock:
            removed = index.remove(ids)
            if removed and self._file is not None and self.options.autosave:
                self._file.save(index)
        return removed

    def _index_again(self, held: StoreIndex, ids: list[str]) -> None:
        """Log again those of ``ids`` whose records the store holds (after their tombstones were logged)."""
        assert self._port is not None  # the store-held index has its port
        back = [r for r in self._port.get(ids) if not is_library_record(r.fields)]
        again, vectors = [], []
        for store_id, stored_id, token, _, text in port_hit_fields(back):
            try:
                rid = RecordSealer.resolve_record_id(store_id, stored_id)
                vectors.append(self._open_vector(token, record_id=rid, record_text=text))
                again.append(canonical_record_id(rid))
            except SealError:
                continue  # another tenant's record under the same key, or edited: never indexed here
        if again:
            held.add(again, np.stack(vectors).astype(np.float32))
            logger.info("%d records stored again by a racing add were logged again after their delete", len(again))

    @property
    def dead(self) -> int:
        """Index entries whose records the store did not return (a writer killed before it stored them, or a
        delete that reached the store but not the index): skipped at every search that reads them."""
        return self._dead

    def count_dead(self, asked: Iterable[Any], returned: int) -> None:
        """Count the entries a fetch by id asked for and did not get back (never removed from the index: a
        lagging or failing read must not delete; ``rebuild_index`` and later deletes settle them)."""
        missing = len(set(map(str, asked))) - returned
        if missing > 0:
            with self._lock:
                self._dead += missing
            logger.info("%d index entries read by a search have no record in the store (skipped)", missing)

    def plan(
        self,
        query: Any,
        k: int,
        *,
        marker_id: str,
        marker_seen: bool,
        probing: bool = True,
        need: int | None = None,
    ) -> Picked:
        """The ids of the ``k`` records the index ranks best for the clean query, with the store-held index's last
        read of its log left to the caller's read of the records where that saves a round trip (``probing``, no
        replica: :meth:`StoreIndex.candidates_probing`).

        ``need``: how many records the caller keeps of those read, when it filters none out after the read. While
        the store-held index is exact (below ``train_at``: no codes yet) the opened vectors' exact ranking only
        confirms the index's, so ``need`` plus :data:`EXACT_EXTRA` are read, not ``k``; once trained, the options'
        ``open_k`` are read, or where it is unset as many as the index's size needs (:mod:`.sizing`), and at least
        ``need``. The rest of the ``k`` (:attr:`Picked.more`) is read only when some but fewer than ``need`` came
        back (entries whose records are gone; nothing back is an empty answer, returned as such).

        Raises:
            SealError: The store holds records but neither this key and tenant's log nor its marker.
            IndexMissingError: An app-side index store opened by a process without its file.
        """
        q = check_store_vectors(np.asarray(query).reshape(1, -1), name="query vector")[0]
        if not self.held:
            index = self.index()
            if index is None:
                if marker_seen:
                    raise IndexMissingError(
                        "this store was written with the app-side index, and this process holds none: open it with "
                        "the index_path it was saved to (AppIndexSearch(index_path=...)); the records are all in "
                        "the store, but without the index nothing can rank them"
                    )
                return Picked([])
            return Picked(index.search(q, k))
        held = self.store_index(len(q))
        assert held is not None
        held.log.ignored.add(marker_id)
        pool = records_read(held, k, need)
        more = None if pool == k else lambda: held.index.search(q, k)
        if probing and self.replica is None:
            found, probe = held.candidates_probing(q, pool)
        else:
            found, probe = held.candidates(q, pool), None
        if probe is not None and not found:  # the checks below read the whole log: read it now
            if held.probed(probe, self._port.get(probe.ids) if self._port is not None else []):
                found = held.index.search(q, pool)
            probe = None
        if self.replica is not None:
            self.replica.sync()  # what the log named since: fetched by id, the same reads whatever the query
        if not found and held.log.others_seen and not marker_seen:
            raise SealError(
                "this store holds records, and neither an index log nor a marker under this key and tenant: "
                "wrong key or tenant, or records written in another mode or by an older release (whose "
                "single-stage stores wrote no marker); nothing is returned"
            )
        if not found and held.log.others_seen and not self._warned:
            self._warned = True
            logger.warning("a store holds records and its marker but no index log: rebuild_index() indexes them")
            warnings.warn(
                "this store holds records and this key and tenant's marker, but no index log, so the search "
                "finds none of them (the log was lost, or the records are another tenant's): index the sealed "
                "records with rebuild_index()",
                UnindexedRecordsWarning,
                stacklevel=5,  # the user's call, through the mode's find() and SealedSearch.index_plan()
            )
        if probe is None:
            return Picked(found, more=more)
        pending = probe

        def settle(records: Sequence[PortRecord]) -> list[str] | None:
            return held.index.search(q, pool) if held.probed(pending, records) else None

        return Picked(found, probe.ids, settle, more)
