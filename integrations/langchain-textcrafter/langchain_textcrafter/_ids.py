"""Record ids of :class:`~langchain_textcrafter.SealedVectorStore`: the user's ids outside, keyed ids in the store.

By default (``record_ids="keyed"``) the wrapped store holds every record under its keyed id
(:meth:`textcrafter_rag.sealed.records.RecordSealer.keyed_id`: a UUID that names nothing), and the user's
id only sealed inside the record; reads return the user's ids. These steps map the ids a caller gives
(``get_by_ids``, ``delete``, ``copy_to``) to the store's. A store may also hold records under the other
scheme's ids (written by the previous release, whose ids were clear, or with ``record_ids="clear"``). In keyed
mode an id not found under its keyed id is looked up under the user's clear id only when the caller says the
store may hold such records (``legacy_clear_ids=True``): that lookup hands the store the user's id, so nothing
the store holds (a marker it can delete or edit) turns it on, and without it no clear id is ever sent, on a
miss, a delete or a store that cannot read by id. A clear reader looks up keyed ids, which name nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.logs import logger
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.engine import WriteSteps, arun, delete_records, marker_record, run, settle_marker
from textcrafter_rag.sealed.marker import StoreMarker
from textcrafter_rag.sealed.modes import MODES
from textcrafter_rag.sealed.record_ids import check_writable
from textcrafter_rag.sealed.records import ID_FIELD, IDS_KEY, RecordSealer, canonical_record_id

from ._reading import has_get_by_ids

__all__ = ["SealedIds"]


class SealedIds:
    """The id mapping steps of the sealed store (mixed into it)."""

    _store: VectorStore
    _records: RecordSealer
    _marker_id: str
    _store_marker: StoreMarker
    #: The id scheme the store's marker record names, once read (``None``: not read, or no marker).
    _ids_scheme: str | None = None
    _search: SealedSearch
    _check: Callable[[dict[str, Any]], None]
    _opened: Callable[[Iterable[Document]], list[Document]]
    #: The sealed store's own: the id the wrapped store returned with a record.
    _store_id: Callable[[Document], Any]
    #: The sealed store's own: switch to the mode an existing store was written in.
    _use: Callable[..., None]
    _adopts: Callable[[str], bool]
    _shim: Any
    _default_mode: bool
    _marker_checked: bool

    def _stored_ids(self, docs: Sequence[Document]) -> set[str]:
        """The canonical store ids of records read back."""
        out = set()
        for doc in docs:
            sid = self._store_id(doc)
            sid = sid if sid is not None else (doc.metadata or {}).get(ID_FIELD)
            if sid is not None:
                out.add(canonical_record_id(sid))
        return out

    def _missing(self, ids: Sequence[Any], tried: Sequence[Any], found: Sequence[Document]) -> list[Any]:
        got = self._stored_ids(found)
        return [i for i, t in zip(ids, tried, strict=True) if canonical_record_id(t) not in got]

    def _find(self, ids: Sequence[Any]) -> list[Document]:
        """The stored (sealed) records of these user ids: under this scheme's store ids, else the other's."""
        ids = list(ids)
        tried = [self._records.store_id(i) for i in ids]
        found = list(self._store.get_by_ids(tried))
        missing = self._missing(ids, tried, found)
        if missing and not self._knows_keyed_only():
            found += self._store.get_by_ids([self._records.other_store_id(i) for i in missing])
        return found

    async def _afind(self, ids: Sequence[Any]) -> list[Document]:
        """Async :meth:`_find`."""
        ids = list(ids)
        tried = [self._records.store_id(i) for i in ids]
        found = list(await self._store.aget_by_ids(tried))
        missing = self._missing(ids, tried, found)
        if missing and not await asyncio.to_thread(self._knows_keyed_only):
            found += await self._store.aget_by_ids([self._records.other_store_id(i) for i in missing])
        return found

    def _marker_scheme(self) -> str | None:
        """The id scheme the marker names (``None``: no marker read; ``"clear"``: written before ids were keyed)."""
        if self._ids_scheme is None and has_get_by_ids(self._store):
            marker = self._store.get_by_ids([self._marker_id])
            if marker:
                self._ids_scheme = str((marker[0].metadata or {}).get(IDS_KEY, "clear"))
        return self._ids_scheme

    def _knows_keyed_only(self) -> bool:
        """Whether a missed id is never looked up under the other scheme's id (a clear one): by the caller's option.

        Not by the marker: its plain ``_tc_ids`` is whatever the host says, and single-stage stores write none.
        """
        return not self._records.ids.looks_up_other

    def _check_writable(self) -> None:
        """Refuse clear ids in a store whose marker says keyed ids only (see ``check_writable``)."""
        check_writable(self._records.record_ids, self._marker_scheme())

    def _delete_ids(self, ids: Sequence[Any], found: Sequence[Document] | None) -> list[Any]:
        """The store ids to delete for these user ids (``found``: their records read back, ``None`` if unreadable).

        Records found are deleted under the ids they are stored under; an id found under neither scheme is
        passed under this scheme's store id, so the wrapped store answers for it as it did before (FAISS raises).
        A store that cannot read by id is given both schemes' ids where the other's may be sent (see the module).
        """
        tried = [self._records.store_id(i) for i in ids]
        if found is None:
            return tried + ([] if self._knows_keyed_only() else [self._records.other_store_id(i) for i in ids])
        got = self._stored_ids(found)
        out = []
        for uid, sid in zip(ids, tried, strict=True):
            other = self._records.other_store_id(uid)
            out.append(other if canonical_record_id(sid) not in got and canonical_record_id(other) in got else sid)
        return out

    @staticmethod
    def _user_ids(returned: Sequence[Any], store_ids: Sequence[Any], user_ids: Sequence[Any]) -> list[Any]:
        """What the wrapped store returned from an add, as the user's ids (stores return the ids they were given)."""
        back = {canonical_record_id(s): u for s, u in zip(store_ids, user_ids, strict=True)}
        return [back.get(canonical_record_id(r), r) if r is not None else r for r in returned]

    # -- the public id paths -----------------------------------------------------------------------

    def store_ids(self, ids: Sequence[Any]) -> list[Any]:
        """The ids the wrapped store holds records of these ids under when written here (keyed ids by default).

        For reading :attr:`store` directly (its own tools, backups); every method of the sealed store takes your ids.
        """
        return [self._records.store_id(i) for i in ids]

    def get_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """The documents with these ids (yours: mapped to the store's), opened."""
        return self._opened(self._find(ids))

    async def aget_by_ids(self, ids: Sequence[Any], /) -> list[Document]:
        """Async :meth:`get_by_ids`."""
        return self._opened(await self._afind(ids))

    def delete(self, ids: list[Any] | None = None, **kwargs: Any) -> bool | None:
        """Delete these records (your ids, mapped to the store's) from the wrapped store and the app-side index."""
        self._check(kwargs)
        if ids is None:
            return self._store.delete(None, **kwargs)
        found = self._find(ids) if has_get_by_ids(self._store) else None
        return self._delete_stored(self._delete_ids(ids, found), **kwargs)

    def _delete_stored(self, store_ids: list[Any], **kwargs: Any) -> bool | None:
        return run(self._deleting(store_ids), write=lambda: self._store.delete(store_ids, **kwargs))

    def _deleting(self, store_ids: list[Any]) -> WriteSteps:
        """A delete of these store ids (:func:`~textcrafter_rag.sealed.engine.delete_records`: the store first, then
        the tombstones and the read-back in an index mode).

        The marker is read first: it names the store-held index's dimension, which a process whose first call is a
        delete knows from nothing else. Without it no tombstone would be logged: the deleted records' entries (their
        sealed clean vectors) would stay in the log and in every snapshot, read and skipped by every search.
        """
        if self._default_mode:  # no mode named: the marker may name another, learnt before the core is taken
            self._marker(write=False)
        return delete_records(self._search, store_ids, settle=functools.partial(self._marker, write=False))

    async def adelete(self, ids: list[Any] | None = None, **kwargs: Any) -> bool | None:
        """Async :meth:`delete`."""
        self._check(kwargs)
        if ids is None:
            return await self._store.adelete(None, **kwargs)
        found = await self._afind(ids) if has_get_by_ids(self._store) else None
        store_ids = self._delete_ids(ids, found)
        steps = await asyncio.to_thread(self._deleting, store_ids)
        return await arun(steps, write=lambda: self._store.adelete(store_ids, **kwargs))

    # -- the mode marker -------------------------------------------------------------------------

    def _marker(self, *, write: bool, dim: int | None = None) -> None:
        """Refuse a store written in another mode (before anything is sent); mark a new sealed-search store."""
        if write:
            self._check_writable()
        if self._marker_checked or not has_get_by_ids(self._store):
            return
        found = self._store.get_by_ids([self._marker_id])
        # the mode from the sealed text: the plain field is the host's to edit (a forged "single" is refused)
        written = self._store_marker.mode(found[0].metadata or {}, found[0].page_content) if found else None
        if self._default_mode and written in MODES and written != self._search.mode and self._adopts(written):
            # no search= given: a store written before (in an earlier release's default, say) opens in its own mode
            logger.info("opening a store written in %r mode in that mode (no search= given)", written)
            self._use(MODES[written].reopened(), adopted=True)
        self._default_mode = False
        settle_marker(self._search, written, found[0].metadata if found else None)
        if found:
            self._marker_checked = True
            return
        if not write or dim is None:
            return
        scheme = self._records.record_ids
        text, fields, vector = marker_record(self._search, self._marker_id, ids_scheme=scheme, dim=dim)
        marker = Document(id=self._marker_id, page_content=text, metadata=fields)
        with self._shim.registered({text: vector}):
            self._store.add_documents([marker], ids=[self._marker_id])
        self._marker_checked = True
        self._ids_scheme = self._records.record_ids
