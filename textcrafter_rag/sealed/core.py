"""The one framework-free core of sealed search: what the store receives, what the application opens and ranks.

Both adapters' sealed stores (LangChain ``SealedVectorStore``, LlamaIndex ``sealed_storage_context``) build one
:class:`SealedSearch` from one parsed key and only translate Documents and Nodes. The options object it is given
selects the mode (:mod:`.modes`, one file each): the store-held index (the default), the app-side index file,
candidates, or single-stage. In the sealed modes every record carries its clean direction sealed (``_tc_vec``,
bound to the record id) and the plain mode ``_tc_mode``; hits are opened here, de-duplicated, capped, and ranked
by exact cosine. A hit that does not open (another tenant under the same key, edited, no sealed vector) is skipped
and counted (:attr:`SealedSearch.skipped`, one warning per process and store, a record on the ``textcrafter_rag``
logger at each search), or raises with ``strict=True``; :attr:`SealedSearch.stats` reads every counter. A marker
record (:meth:`SealedSearch.marker_id`) tells a store's mode to a process opening it in another mode.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..deprecation import renamed_keyword
from ..errors import InvalidInputError, InvalidTypeError
from ..keyed import keyed_normals
from ..logs import SearchCounts, SearchStats, logger
from ..numerics import unit_rows
from ..sealing import KeyHolder, SealError, SecretKey
from ..validation import check_store_vectors
from .app_index import AppIndexSearch
from .candidates import VECTOR_KEY, TwoStage, TwoStageSearch, rerank
from .index_modes import IndexMissingError, IndexModes, Picked, UnindexedRecordsWarning
from .layout import DIM_KEY, INDEX_MODES, MARKER_KEY, MODE_KEY
from .marker import (
    ModeMismatchError,
    StoreMarker,
    StoreRanksWarning,
    UnprotectedVectorsWarning,
    check_marker_mode,
    single_stage_marker_id,
)
from .modes import SingleStageSearch, mode_of
from .port import PortRecord, RecordPort
from .records import RecordSealer, canonical_record_id
from .replica import Fetch, HitFieldsOf, port_hit_fields
from .rounds import FIRST_ROUND, CapCounter, HitFields, OpenedHits, RecallCapWarning, Rounds, SkippedRecordsWarning
from .store_index import StoreIndex, StoreIndexSearch

__all__ = [
    "DIM_KEY",
    "INDEX_MODES",
    "MODE_KEY",
    "MARKER_KEY",
    "IndexMissingError",
    "ModeMismatchError",
    "OpenedHits",
    "RecallCapWarning",
    "SealedSearch",
    "SearchOptions",
    "SearchStats",
    "SkippedRecordsWarning",
    "StoreRanksWarning",
    "UnindexedRecordsWarning",
    "UnprotectedVectorsWarning",
    "check_marker_mode",
    "logger",
    "single_stage_marker_id",
]

T = TypeVar("T")
#: What selects a mode (one options class a mode, :mod:`.modes`): the store-held index, the app-side index file,
#: candidate search, or single-stage (the store ranks).
SearchOptions = StoreIndexSearch | AppIndexSearch | TwoStageSearch | SingleStageSearch


class SealedSearch(KeyHolder):
    """Seal records' vectors, build what the store receives, open and rank hits: one key, one tenant.

    Args:
        key: The store's key, parsed once by the caller (:class:`~textcrafter_rag.sealing.SecretKey`).
        tenant: The tenant or collection name mixed into the key (``context=``: its deprecated name).
        options: A mode's options (:data:`SearchOptions`): :class:`StoreIndexSearch`, :class:`AppIndexSearch`,
            :class:`TwoStageSearch` (candidates) or :class:`SingleStageSearch`.
        strict: Raise on the first hit that does not open, instead of skipping and counting it.

    Instances hold key material and refuse to be pickled; a copy is the object itself (copies of a store share it).
    """

    def __init__(
        self, key: SecretKey, *, tenant: str = "", options: SearchOptions, strict: bool = False, context: Any = None
    ) -> None:
        context = renamed_keyword(tenant, context, new="tenant=", old="SealedSearch(context=)", default="")
        if not isinstance(key, SecretKey):
            raise InvalidTypeError(f"key must be a SecretKey (parsed once by the caller), got {type(key).__name__}")
        #: The mode (:mod:`.modes`): what the store receives, and how a search asks it.
        self.search_mode = mode_of(options)
        self.options = options
        #: The mode's name, as records and the marker carry it.
        self.mode = self.search_mode.name
        self.strict = bool(strict)
        self._context = context
        self._marker = StoreMarker(key, tenant=context)
        self._vector_key = key.subkey("index-store-vector", context=context)
        # The candidate mode's noise and rotation; in index mode only its vector sealing is used.
        candidates = options if isinstance(options, TwoStageSearch) else TwoStageSearch(doc_strength=0.0)
        self._two_stage = TwoStage(key, context=context, search=candidates)
        self._lock = threading.RLock()
        self._counts = SearchCounts()
        self._caps = CapCounter(self.open_k)
        #: Whether this store's marker record was found (the store was written before, in this mode).
        self.marker_seen = False
        #: The index side, in the modes where the application picks the records (``None`` in the others).
        index_side = self.search_mode.keeps_index and isinstance(options, (StoreIndexSearch, AppIndexSearch))
        opens = self._two_stage.open_vector
        self.indexes = (
            IndexModes(key, tenant=context, options=options, lock=self._lock, open_vector=opens) if index_side else None
        )

    # -- limits -------------------------------------------------------------------------------------

    @property
    def open_k(self) -> int:
        """The most records one query reads: candidates the store returns, or records fetched by id (index)."""
        return self.options.most_opened if isinstance(self.options, StoreIndexSearch) else self.options.open_k

    def check_k(self, k: int) -> int:
        """``k`` itself, refused if more than :attr:`open_k` records would be needed."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInputError(f"k must be a positive int, got {k!r}")
        if k > self.open_k:
            raise InvalidInputError(f"k={k} exceeds this store's open_k={self.open_k}: raise open_k for more hits")
        return int(k)

    # -- writing ------------------------------------------------------------------------------------

    def check_vectors(self, clean: Any, *, name: str = "document vectors") -> np.ndarray:
        """The one validation of every vector on a store path (see :func:`check_store_vectors`)."""
        return check_store_vectors(clean, name=name)

    def store_vectors(
        self, clean: np.ndarray, record_ids: Sequence[Any], *, seeds: Sequence[bytes | None] | None = None
    ) -> np.ndarray:
        """What the store receives for these (validated) vectors, as the mode says (:meth:`SearchMode.store_vectors`).

        ``seeds``: the noise seeds opened with copied records (:attr:`OpenedHits.seeds`), so a copy is the
        same draw as its source, not a second one (see :meth:`TwoStage.protect_documents`).
        """
        return self.search_mode.store_vectors(self, clean, record_ids, seeds)

    def candidate_vectors(self, clean: np.ndarray, seeds: Sequence[bytes | None] | None) -> np.ndarray:
        """Candidate search's vectors for records (:meth:`TwoStage.protect_documents`)."""
        return self._two_stage.protect_documents(clean, seeds=seeds)

    def candidate_query(self, query: np.ndarray) -> np.ndarray:
        """Candidate search's protected query (:meth:`TwoStage.protect_query`)."""
        return self._two_stage.protect_query(query)

    def id_vectors(self, record_ids: Sequence[Any], dim: int) -> np.ndarray:
        """Keyed random unit vectors of record ids: what the index modes' store holds (nothing to rank)."""
        return self.keyed_vectors([canonical_record_id(r) for r in record_ids], dim)

    def keyed_vectors(self, labels: Sequence[str], dim: int) -> np.ndarray:
        """Unit vectors from a keyed PRF of each label: unrelated to any text, unpredictable without the key."""
        out = np.empty((len(labels), dim), dtype=np.float64)
        for i, label in enumerate(labels):
            out[i] = keyed_normals(hmac.new(self._vector_key, label.encode("utf-8"), hashlib.sha256).digest(), dim, dim)
        return unit_rows(out).astype(np.float32)

    def seal_vector(
        self, clean: np.ndarray, *, record_id: Any, record_text: str | None = None, seed: bytes | None = None
    ) -> str:
        """The clean direction, packed and sealed, bound to the record id and its sealed text (``_tc_vec``)."""
        return self._two_stage.seal_vector(clean, record_id=record_id, record_text=record_text, seed=seed)

    def record_fields(
        self,
        clean: np.ndarray,
        record_ids: Sequence[Any],
        record_texts: Sequence[str],
        *,
        seeds: Sequence[bytes | None] | None = None,
    ) -> list[dict[str, str]]:
        """The plain fields each record carries: its sealed vector (bound to its sealed text) and the mode.

        ``seeds``: as :meth:`store_vectors` (the seed a copy was drawn with is sealed beside its vector).
        """
        if not self.search_mode.seals_vectors:
            return [{} for _ in record_ids]
        given = list(seeds) if seeds is not None else [None] * len(record_ids)
        return [
            {VECTOR_KEY: self.seal_vector(v, record_id=r, record_text=t, seed=s), MODE_KEY: self.mode}
            for v, r, t, s in zip(clean, record_ids, record_texts, given, strict=True)
        ]

    # -- the marker record --------------------------------------------------------------------------

    def marker_id(self) -> str:
        """The id of this tenant's marker record (a UUID, valid in every store; keyed, so it names nothing)."""
        return self._marker.id

    def marker_text(self) -> str:
        """The marker record's sealed text (the mode, bound to the marker id)."""
        return self._marker.text(self.mode)

    # -- the query ----------------------------------------------------------------------------------

    def store_query(self, clean: Any) -> np.ndarray:
        """What the store is searched with (one row), as the mode says (:meth:`SearchMode.store_query`)."""
        row = np.asarray(clean).reshape(1, -1) if not isinstance(clean, str) else clean
        return self.search_mode.store_query(self, check_store_vectors(row, name="query vector"))

    # -- opening and ranking ------------------------------------------------------------------------

    @property
    def skipped(self) -> int:
        """Hits skipped so far because they did not open (another tenant, edited, no sealed vector)."""
        return self._counts.skipped

    def _skip(self, rid: str, error: SealError) -> None:
        if self.strict:
            raise error
        if self._counts.skip():  # the first: warned once, logged at each search (open_hits, first_that_open)
            warnings.warn(
                "a search skipped records that do not open under this key and tenant (another tenant under the "
                "same key, edited, or written without a sealed vector); SealedSearch.skipped counts them, "
                "strict=True raises instead",
                SkippedRecordsWarning,
                stacklevel=4,
            )

    def open_hits(self, hits: Sequence[tuple[Any, Any, Any, Any, Any]], *, require_one: bool = True) -> OpenedHits:
        """Open the sealed vectors of hits, in the store's order.

        Each hit is ``(store id, stored _tc_id, sealed vector, mode, sealed text)``: the id the store returned
        (or ``None``), the record id the record carries (see
        :meth:`~textcrafter_rag.sealed.records.RecordSealer.resolve_record_id`), ``_tc_vec``, ``_tc_mode`` and
        the record's sealed text as the store holds it (the vector is bound to it).

        Duplicates (one record returned twice, in any id spelling) are dropped, at most :attr:`open_k`
        hits are opened, the marker record is passed over, and hits that do not open are skipped and counted;
        if none opens, the key or tenant is wrong and that is an error, not an empty answer (``require_one``:
        a later round of the same search may find none new that opens).

        Raises:
            ModeMismatchError: A hit was written in another mode, or no hit carries a sealed vector while
                some were returned (a single-stage store opened in this mode).
            SealError: No hit opens (wrong key or tenant), or with ``strict=True`` the first that does not.
        """
        positions: list[int] = []
        rids: list[str] = []
        vectors: list[np.ndarray] = []
        seeds: list[bytes | None] = []
        seen: set[str] = set()
        unmarked = failed = 0
        for pos, (store_id, stored_id, token, mode, text) in enumerate(hits):
            if len(positions) >= self.open_k:
                break
            try:
                rid = RecordSealer.resolve_record_id(store_id, stored_id)
            except SealError as exc:
                self._skip("?", exc)
                failed += 1
                continue
            if rid in seen or rid == self.marker_id():
                continue
            seen.add(rid)
            if mode is not None and mode != self.mode:
                raise ModeMismatchError(
                    f"record {rid!r} was written in {mode!r} mode and this store searches in {self.mode!r} mode: "
                    f"open it with the options it was written with"
                )
            if token is None and mode is None:
                unmarked += 1
            try:
                vector, seed = self._two_stage.open_vector_and_seed(
                    token, record_id=rid, record_text=text if isinstance(text, str) else None
                )
            except SealError as exc:
                self._skip(rid, exc)
                failed += 1
                continue
            positions.append(pos)
            rids.append(rid)
            vectors.append(vector)
            seeds.append(seed)
        if failed:
            logger.info("a search skipped %d records that do not open under this key and tenant", failed)
        if not positions and unmarked:
            raise ModeMismatchError(
                f"none of the {unmarked} records returned has a sealed vector: the store was written single-stage "
                "(the mode is chosen by search=); nothing is returned"
            )
        if not positions and failed and require_one:
            raise SealError(
                f"none of the {failed} records returned opens under this key and tenant: wrong key or tenant "
                "(or every record was edited); nothing is returned"
            )
        dim = len(vectors[0]) if vectors else 0
        return OpenedHits(
            positions, rids, np.stack(vectors) if vectors else np.empty((0, dim), dtype=np.float32), seeds
        )

    def rounds(self, query: Any, k: int, fields: Callable[[Sequence[T]], list[HitFields]]) -> Rounds[T]:
        """One candidate search's rounds (:mod:`~textcrafter_rag.sealed.rounds`): the adapter asks the store.

        Drive it with ``while r.size is not None: r.take(store_search(store_query, k=r.size))``; a search that
        stopped at ``open_k`` short of the recall target is counted in :attr:`capped` and warned once.
        """
        assert isinstance(self.options, TwoStageSearch)
        self._counts.search()
        return Rounds(
            self._two_stage,
            self.check_vectors(np.asarray(query).reshape(1, -1), name="query vector")[0],
            self.check_k(k),
            fields=fields,
            open_hits=lambda new, first: self.open_hits(new, require_one=first),
            cap=self.options.open_k,
            recall=self.options.recall,
            first=FIRST_ROUND,
            caps=self._caps,
        )

    @property
    def capped(self) -> int:
        """Searches that reached ``open_k`` before the recall target's rule was met (their recall may be lower)."""
        return self._caps.count

    @property
    def stats(self) -> SearchStats:
        """The counters so far, in one snapshot: searches, capped searches, dead index entries, skipped records."""
        return self._counts.snapshot(capped=self.capped, dead=self.dead)

    def first_that_open(
        self, ranked: Sequence[tuple[int, float]], open_record: Callable[[int], T], k: int
    ) -> list[tuple[T, float]]:
        """The first ``k`` of ``ranked`` whose records open (``open_record(row)``); the others skipped and counted.

        A record's vector can open while its text or a sealed field does not (edited in the store): it is
        passed over like a hit whose vector does not open, so one bad record never breaks a search.
        """
        out: list[tuple[T, float]] = []
        for row, score in ranked:
            if len(out) >= k:
                break
            try:
                out.append((open_record(row), score))
            except SealError as exc:
                self._skip(str(row), exc)
                logger.info("a search skipped a record whose vector opens and whose text or fields do not")
        return out

    @staticmethod
    def rank(query: Any, vectors: np.ndarray, k: int) -> list[tuple[int, float]]:
        """``(row, cosine)`` of the best ``k`` rows of ``vectors`` by exact cosine with the clean query."""
        if len(vectors) == 0:
            return []
        order, scores = rerank(np.asarray(query, dtype=np.float32).reshape(-1), vectors, k)
        return [(int(i), float(s)) for i, s in zip(order, scores, strict=True)]

    # -- the index modes (the application picks the records: :mod:`textcrafter_rag.sealed.index_modes`) --

    def _indexes(self) -> IndexModes:
        if self.indexes is None:
            raise InvalidInputError(
                f"this store searches in {self.mode!r} mode, which keeps no index: this is for the store-held index "
                "(search=StoreIndexSearch()) or the app-side index file"
            )
        return self.indexes

    def attach(self, port: RecordPort, *, fetch: Fetch | None = None, fields: HitFieldsOf | None = None) -> None:
        """The store the store-held index keeps its log in (the adapter's :class:`RecordPort`), and what a replica
        (``StoreIndexSearch(replica=True)``) reads records by id with: the adapter's own reader and fields."""
        if self.indexes is not None:
            self.indexes.attach(port)
            if self.indexes.replica is not None and fetch is not None and fields is not None:
                self.indexes.replicate(fetch, fields)

    def store_index(self, dim: int | None = None) -> StoreIndex | None:
        """The store-held index (``None`` before its dimension is known, and in the other modes)."""
        return self.indexes.store_index(dim) if self.indexes is not None and self.indexes.held else None

    def index_add(self, record_ids: Sequence[Any], clean: np.ndarray) -> None:
        """Index records *before* the store takes them (:meth:`IndexModes.add`); nothing without an index."""
        if self.indexes is not None:
            self.indexes.add(record_ids, clean)

    def index_stored(self, record_ids: Sequence[Any], clean: np.ndarray) -> None:
        """After the store took them: log again what a racing delete removed (:meth:`IndexModes.stored`)."""
        if self.indexes is not None:
            self.indexes.stored(record_ids, clean)

    def index_remove(self, record_ids: Sequence[Any]) -> int:
        """Forget records *after* the store deleted them (:meth:`IndexModes.remove`); how many (0: no index)."""
        return self.indexes.remove(record_ids) if self.indexes is not None else 0

    def index_records(self, ids: Sequence[str]) -> list[Any] | None:
        """The replica's records for the candidates' ids (``None`` without a replica: read them from the store)."""
        return self._indexes().records(ids)

    def index_candidates(self, query: Any) -> list[str]:
        """The ids of the :attr:`open_k` records the index ranks best for the clean query."""
        return self.index_plan(query, probing=False).ids

    def index_plan(self, query: Any, *, need: int | None = None, probing: bool = True) -> Picked:
        """:meth:`index_candidates` as :meth:`IndexModes.plan` picks them (``probing``, ``need``)."""
        self._counts.search()
        return self._indexes().plan(
            query, self.open_k, marker_id=self.marker_id(), marker_seen=self.marker_seen, probing=probing, need=need
        )

    @property
    def dead(self) -> int:
        """Index entries whose records the store did not return (skipped, counted, never removed)."""
        return self.indexes.dead if self.indexes is not None else 0

    def count_dead(self, asked: Sequence[Any], returned: int) -> None:
        """Count the entries a fetch by id asked for and did not get back."""
        self._indexes().count_dead(asked, returned)

    def before_clear(self) -> Any:
        """What a clear of the store must know first (:meth:`IndexModes.before_clear`; ``None``: no index)."""
        return self.indexes.before_clear() if self.indexes is not None else None

    def cleared(self, state: Any) -> None:
        """After the store was cleared: the index forgets what it held (:meth:`IndexModes.cleared`)."""
        if self.indexes is not None and state is not None:
            self.indexes.cleared(state)

    def save_index(self) -> None:
        """Write the app-side index to its file now (it is also written after every add and delete)."""
        self._indexes().save()

    def rebuild_index(
        self, *, batch_size: int = 1_000, progress: bool = True, before: Callable[[], Any] | None = None
    ) -> int:
        """Index every sealed record the store lists under this key and tenant (store-held index); how many.
        Records of another tenant or edited ones are skipped and counted (:attr:`skipped`); nothing is tombstoned.
        ``before`` runs once the mode is checked (the adapter reads the marker, which names the dimension)."""

        def open_records(part: list[PortRecord]) -> tuple[list[str], np.ndarray]:
            opened = self.open_hits(port_hit_fields(part), require_one=False)
            return opened.record_ids, opened.vectors

        rebuild = self._indexes().rebuild
        return rebuild(open_records, batch_size=batch_size, group=self.open_k, progress=progress, before=before)

    def __repr__(self) -> str:
        return f"SealedSearch(options={self.options!r}, key=<redacted>)"
