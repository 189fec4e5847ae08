"""The sealed-store contract: what every adapter's sealed vector store must do, in every search mode, tested once.

Each integration package subclasses :class:`SealedStoreContract` in one test module (the subclass's name starts
with ``Test``) and provides a few hooks: a fresh recording in-memory backing store, a sealed store over it for a
key, tenant and mode, and the four calls (add, search, get, delete), plus what the backing store holds and
received. pytest then runs every ``test_*`` method below in each mode (:data:`MODES`)::

    class TestSealedStoreContract(SealedStoreContract):
        def new_backing(self): return RecordingBacking()
        def open_store(self, backing, known, *, key, tenant, search): return SealedVectorStore(...)
        ...

The checks, in every mode: what the store receives (no plaintext text, metadata value or user id; in the
sealed modes no clean record vector and no clean query vector), ids (the user's come back, the store holds
keyed ones), deletes (gone here and for another process with the key), the marker (one record after the first
write; another mode is refused before anything is sent), and errors (a wrong key, bad input). The encoder is
:class:`KnownVectors`, so every clean vector is known, and the keys are fixed: the tests are deterministic.

A check that fails on a known library bug is listed in the subclass's :attr:`SealedStoreContract.KNOWN_BUGS`
and runs as a strict xfail, so it is reported, never skipped, and turns red once the bug is fixed.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from ..errors import InvalidInputError
from ..sealed.app_index import AppIndexSearch, SingleProcessIndexWarning
from ..sealed.candidates import TwoStageSearch
from ..sealed.layout import MARKER_KEY
from ..sealed.marker import ModeMismatchError
from ..sealed.modes import SingleStageSearch
from ..sealed.store_index import StoreIndexSearch
from ..sealing import SealError
from .known import KnownVectors

__all__ = ["MODES", "OPEN_K", "Held", "Hit", "Request", "SealedStoreContract", "search_options"]

#: The search modes every check runs in: the store-held index (the default), candidates, single-stage
#: (``search=None``) and the app-side index file.
MODES: tuple[str, ...] = ("store-index", "candidates", "single", "app-index")
#: Records one search opens in the sealed modes (a search's ``k`` may not exceed it).
OPEN_K = 20
#: The sealed modes: the store never receives a clean vector in these.
SEALED_MODES = frozenset(MODES) - {"single"}


def search_options(mode: str, index_path: Path) -> Any:
    """The ``search=`` options of ``mode`` (``index_path``: the app-side index's file)."""
    if mode == "store-index":
        return StoreIndexSearch(open_k=OPEN_K)
    if mode == "candidates":
        return TwoStageSearch(open_k=OPEN_K)
    if mode == "app-index":
        with warnings.catch_warnings():  # the file serves one process: the contract's processes take turns
            warnings.simplefilter("ignore", SingleProcessIndexWarning)
            return AppIndexSearch(open_k=OPEN_K, index_path=index_path)
    if mode == "single":
        return SingleStageSearch()
    raise InvalidInputError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


@dataclass(frozen=True)
class Hit:
    """A record as the sealed store returned it (opened): the user's id, text and metadata."""

    id: Any
    text: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class Held:
    """A record as the backing store holds it: its id, text, every plain field beside it, and its vector."""

    id: str
    text: str
    fields: Mapping[str, Any]
    vector: Sequence[float] | None


@dataclass(frozen=True)
class Request:
    """One call the backing store received: ``kind`` is ``"add"``, ``"search"``, ``"get"`` or ``"delete"``.

    ``ids``: the ids it named; ``vector``: the vector a search ranked by; ``text``: everything else it carried
    (records added, query strings, keyword arguments), as text, for the plaintext checks.
    """

    kind: str
    ids: tuple[str, ...] = ()
    vector: tuple[float, ...] | None = None
    text: str = ""


#: Two fixed keys (never real ones): the store's, and the wrong one.
KEY = bytes(range(101, 133))
WRONG_KEY = bytes(range(1, 33))


def _unit(v: Any) -> np.ndarray:
    x = np.asarray(v, dtype=np.float64).ravel()
    return x / np.linalg.norm(x)


def _near_any(vector: Any, clean: Sequence[Any]) -> bool:
    """Whether ``vector`` is (nearly) one of the clean vectors, up to its norm."""
    v = _unit(vector)
    return any(len(c) == len(v) and float(v @ _unit(c)) > 0.99 for c in clean)


class SealedStoreContract(ABC):
    """Behaviour both adapters' sealed stores must show in every mode; subclass it and provide the hooks."""

    #: The records the tests write (distinctive strings, so a leak of any of them is found by search).
    TEXTS: ClassVar[tuple[str, ...]] = (
        "Jane Doe moved to 12 Elm Street, Leeds",
        "Bob Smith paid with card 4111 1111",
        "Ann Lee called support about her loan",
        "Carl Berg was treated at Ward Seven",
        "Dana Frost opened account Zeta Nine",
        "Eric Holm asked for a mortgage quote",
    )
    IDS: ClassVar[tuple[str, ...]] = tuple(
        f"user-record-{name}" for name in ("jane", "bob", "ann", "carl", "dana", "eric")
    )
    METADATAS: ClassVar[tuple[dict[str, str], ...]] = tuple(
        {"author": f"author {t.split()[0]} {t.split()[1]}", "phone": f"+44 7700 90{i:04d}"} for i, t in enumerate(TEXTS)
    )
    #: The metadata fields sealed (all of the records' fields: no plaintext metadata value reaches the store).
    SEALED_METADATA: ClassVar[tuple[str, ...]] = ("author", "phone")
    QUERY: ClassVar[str] = "who moved to Leeds?"
    TENANT: ClassVar[str] = "contract-tenant"
    #: ``(test name, mode)`` -> reason, for checks that fail on a known library bug of this adapter (strict xfail).
    KNOWN_BUGS: ClassVar[Mapping[tuple[str, str], str]] = {}
    #: As :attr:`KNOWN_BUGS`, for gaps of the core that every adapter shares (strict xfail in every subclass).
    LIBRARY_GAPS: ClassVar[Mapping[tuple[str, str], str]] = {}

    # -- hooks -----------------------------------------------------------------------------------

    @abstractmethod
    def new_backing(self) -> Any:
        """A fresh, empty in-memory backing store that records every call it receives (:meth:`received`)."""

    @abstractmethod
    def open_store(self, backing: Any, known: KnownVectors, *, key: bytes, tenant: str, search: Any) -> Any:
        """A sealed store over ``backing`` (another object over the same records: another process).

        ``search`` is the mode's options (``SingleStageSearch()``: the adapter embeds with its protected
        embeddings), the store seals :attr:`SEALED_METADATA`, and its encoder serves ``known``'s vectors.
        """

    @abstractmethod
    def add(
        self, store: Any, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], ids: Sequence[str]
    ) -> list[Any]:
        """Add records through the adapter's public API; the ids it returns."""

    @abstractmethod
    def search(self, store: Any, query: str, k: int) -> list[Hit]:
        """The top ``k`` records for a text query, through the adapter's public API."""

    @abstractmethod
    def get(self, store: Any, ids: Sequence[str]) -> list[Hit]:
        """The records of these ids (the user's)."""

    @abstractmethod
    def delete(self, store: Any, ids: Sequence[str]) -> None:
        """Delete the records of these ids (the user's)."""

    @abstractmethod
    def held(self, backing: Any) -> list[Held]:
        """Everything the backing store holds, the library's own records (marker, index log) included."""

    @abstractmethod
    def received(self, backing: Any) -> list[Request]:
        """Every call the backing store received so far, in order."""

    def store_ids(self, store: Any, ids: Sequence[str]) -> list[str]:
        """The ids the backing store holds these records under (both adapters' ``store_ids``)."""
        return [str(i) for i in store.store_ids(list(ids))]

    # -- fixtures --------------------------------------------------------------------------------

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture(autouse=True)
    def _known_bugs(self, request: pytest.FixtureRequest) -> None:
        mode = request.node.callspec.params.get("mode") if hasattr(request.node, "callspec") else None
        case = (request.function.__name__, str(mode))
        reason = self.KNOWN_BUGS.get(case) or self.LIBRARY_GAPS.get(case)
        if reason:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

    @pytest.fixture
    def known(self) -> KnownVectors:
        return KnownVectors(dim=32)

    def _open(self, backing: Any, known: KnownVectors, mode: str, tmp_path: Path, *, key: bytes = KEY) -> Any:
        return self.open_store(
            backing, known, key=key, tenant=self.TENANT, search=search_options(mode, tmp_path / f"{mode}.tcidx")
        )

    def _written(self, known: KnownVectors, mode: str, tmp_path: Path) -> tuple[Any, Any]:
        """A backing store and a sealed store over it in ``mode``, with every record written."""
        backing = self.new_backing()
        store = self._open(backing, known, mode, tmp_path)
        assert list(self.add(store, self.TEXTS, self.METADATAS, self.IDS)) == list(self.IDS)
        return backing, store

    def _secrets(self) -> list[str]:
        """Every plaintext the store must never receive: texts, metadata values, the user's ids."""
        return [*self.TEXTS, *(v for m in self.METADATAS for v in m.values()), *self.IDS]

    def _markers(self, backing: Any) -> list[Held]:
        return [h for h in self.held(backing) if MARKER_KEY in h.fields]

    def _sent(self, backing: Any) -> int:
        """How many writes and searches the backing store received (reads by id, the marker's, are not counted)."""
        return sum(r.kind in ("add", "search") for r in self.received(backing))

    # -- (1) what the store receives -------------------------------------------------------------

    def test_the_store_receives_no_plaintext_and_in_sealed_modes_no_clean_vector(
        self, known: KnownVectors, mode: str, tmp_path: Path
    ) -> None:
        backing, store = self._written(known, mode, tmp_path)
        hits = self.search(store, self.QUERY, k=3)
        assert len(hits) == 3 and all(h.text == self.TEXTS[self.IDS.index(h.id)] for h in hits)
        self.get(store, self.IDS[:2])
        self.delete(store, self.IDS[5:])
        held, received = self.held(backing), self.received(backing)
        assert held and any(r.kind == "search" or r.kind == "get" for r in received)
        seen = repr([(h.id, h.text, dict(h.fields)) for h in held]) + repr(received)
        leaked = [s for s in self._secrets() if s in seen]
        assert not leaked, f"the store received plaintext: {leaked}"
        if mode not in SEALED_MODES:
            return
        clean_docs = known.document_vectors(self.TEXTS)
        near = [h.id for h in held if h.vector is not None and _near_any(h.vector, clean_docs)]
        assert not near, f"the store holds clean record vectors: {near}"
        searched = [r.vector for r in received if r.kind == "search" and r.vector is not None]
        assert not [v for v in searched if _near_any(v, [known.query_vector(self.QUERY), *clean_docs])]

    # -- (2) ids ---------------------------------------------------------------------------------

    def test_the_users_ids_come_back_and_the_store_holds_keyed_ids(
        self, known: KnownVectors, mode: str, tmp_path: Path
    ) -> None:
        backing, store = self._written(known, mode, tmp_path)  # add returned the user's ids
        hits = self.search(store, self.QUERY, k=len(self.TEXTS))
        assert sorted(h.id for h in hits) == sorted(self.IDS)
        assert all(h.text == self.TEXTS[self.IDS.index(h.id)] for h in hits)
        assert all(dict(h.metadata) == self.METADATAS[self.IDS.index(h.id)] for h in hits)
        got = self.get(store, [self.IDS[3], self.IDS[1]])
        assert sorted(h.id for h in got) == sorted([self.IDS[3], self.IDS[1]])
        assert {h.id: h.text for h in got} == {self.IDS[i]: self.TEXTS[i] for i in (1, 3)}
        keyed = self.store_ids(store, self.IDS)
        held = {h.id for h in self.held(backing)}
        assert set(keyed) <= held and not held & set(self.IDS)  # keyed ids only, never the user's
        asked = {i for r in self.received(backing) if r.kind in ("get", "delete") for i in r.ids}
        assert not asked & set(self.IDS)

    # -- (3) deletes -----------------------------------------------------------------------------

    def test_a_deleted_id_is_never_returned_here_or_by_another_process(
        self, known: KnownVectors, mode: str, tmp_path: Path
    ) -> None:
        backing, store = self._written(known, mode, tmp_path)
        gone = [self.IDS[0], self.IDS[4]]
        self.delete(store, gone)
        kept = sorted(set(self.IDS) - set(gone))
        other = self._open(backing, known, mode, tmp_path)  # another process: a new object, the same key
        for reader in (store, other):
            for query in (self.QUERY, self.TEXTS[4]):
                assert sorted(h.id for h in self.search(reader, query, k=len(self.TEXTS))) == kept
            assert self.get(reader, gone) == []
            assert [h.id for h in self.get(reader, [gone[0], kept[0]])] == [kept[0]]
        assert not set(self.store_ids(store, gone)) & {h.id for h in self.held(backing)}

    # -- (4) the marker --------------------------------------------------------------------------

    def test_the_first_write_leaves_exactly_one_marker(self, known: KnownVectors, mode: str, tmp_path: Path) -> None:
        backing = self.new_backing()
        store = self._open(backing, known, mode, tmp_path)
        self.add(store, self.TEXTS[:2], self.METADATAS[:2], self.IDS[:2])
        assert len(self._markers(backing)) == 1
        self.add(store, self.TEXTS[2:4], self.METADATAS[2:4], self.IDS[2:4])
        again = self._open(backing, known, mode, tmp_path)  # another process writes too
        self.add(again, self.TEXTS[4:], self.METADATAS[4:], self.IDS[4:])
        markers = self._markers(backing)
        assert len(markers) == 1 and not any(s in repr(markers) for s in self._secrets())

    @pytest.mark.parametrize(("mode", "opened"), [(w, o) for w in MODES for o in MODES if o != w])
    def test_another_mode_is_refused_before_anything_is_sent(
        self, known: KnownVectors, mode: str, opened: str, tmp_path: Path
    ) -> None:
        backing, _ = self._written(known, mode, tmp_path)
        other = self.open_store(
            backing, known, key=KEY, tenant=self.TENANT, search=search_options(opened, tmp_path / "opened.tcidx")
        )
        sent, held = self._sent(backing), len(self.held(backing))
        with pytest.raises(ModeMismatchError):
            self.search(other, self.QUERY, k=2)
        with pytest.raises(ModeMismatchError):
            self.add(other, ["Fay Gold wrote a new note"], [{"author": "Fay Gold"}], ["user-record-fay"])
        assert self._sent(backing) == sent, "a store written in another mode was sent a search or a write"
        assert len(self.held(backing)) == held

    # -- (5) errors ------------------------------------------------------------------------------

    def test_a_wrong_key_opens_nothing_and_its_searches_raise_seal_error(
        self, known: KnownVectors, mode: str, tmp_path: Path
    ) -> None:
        """Documented: another key's keyed ids name no stored record (a read returns nothing), and a search that
        finds records but opens none raises :class:`~textcrafter_rag.sealing.SealError`; never ciphertext."""
        backing, _ = self._written(known, mode, tmp_path)
        wrong = self._open(backing, known, mode, tmp_path, key=WRONG_KEY)
        assert self.get(wrong, self.IDS) == []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # candidates also warn that the records they skipped do not open
            with pytest.raises(SealError) as raised:
                self.search(wrong, self.QUERY, k=3)
        assert not any(s in str(raised.value) for s in self._secrets())

    @pytest.mark.parametrize("k", [0, -1], ids=["zero", "negative"])
    def test_a_k_below_one_raises_invalid_input_and_sends_nothing(
        self, known: KnownVectors, mode: str, k: int, tmp_path: Path
    ) -> None:
        backing, store = self._written(known, mode, tmp_path)
        sent = self._sent(backing)
        with pytest.raises(InvalidInputError):
            self.search(store, self.QUERY, k=k)
        assert self._sent(backing) == sent

    def test_bad_records_and_a_k_over_open_k_raise_invalid_input(
        self, known: KnownVectors, mode: str, tmp_path: Path
    ) -> None:
        backing, store = self._written(known, mode, tmp_path)
        held = len(self.held(backing))
        for field in ("_tc_marker", "_tc_mode", "_tc_vec"):  # the library's own fields are not the user's
            with pytest.raises(InvalidInputError, match="reserved"):
                self.add(store, ["Fay Gold wrote a new note"], [{field: "x"}], ["user-record-fay"])
        assert len(self.held(backing)) == held
        if mode in SEALED_MODES:  # k may not exceed the records a search opens
            with pytest.raises(InvalidInputError, match="open_k"):
                self.search(store, self.QUERY, k=OPEN_K + 1)
