"""Index upkeep of the LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore`: deletes, clears, rebuilds.

In an index mode (the store-held index, or the app-side one) the sealed index, not the store, picks the
records a search reads, so every removal from the store must reach the index too. The order is the write
protocol's: the store deletes first, the index forgets after (a tombstone), so a crash in between leaves an
entry whose record is gone, which searches skip and count (:attr:`~SealedIndexUpkeep.dead`), never a record
that no search finds. Where the store cannot list what a delete removes (a filter on ``ref_doc_id``, or on
plain fields), the entries stay and are skipped and counted the same way. A clear empties the store-held
index's log with the store, and starts a new epoch of it that every process follows.

Without an index (single-stage, candidates) they reach the wrapped store alone, your ids mapped to its own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.engine import WriteSteps, arun, clear_records, delete_records, run
from textcrafter_rag.sealed.index_modes import compact_store_index

__all__ = ["SealedIndexUpkeep"]


class SealedIndexUpkeep:
    """Deletes, clears and rebuilds that keep the sealed index in step with the store (mixed into the store)."""

    _search: SealedSearch
    _store: BasePydanticVectorStore
    _marker_checked: bool
    _ids_scheme: str | None

    # ``_check`` is the sealed vector store's own method; ``_open_mode``, ``_marker``, ``_ref_doc_nodes`` and
    # ``_filtered_nodes`` are the search steps' (:mod:`._sealed_steps`), ``_ref_doc_ids`` and
    # ``_node_store_ids`` the id mapping's (:mod:`._sealed_ids`).

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the nodes of a source document (stored under its keyed id, and under its clear one if written so).

        In an index mode the index forgets them after the store deleted them, where the store can list a
        source document's nodes (a filter on ``ref_doc_id``); elsewhere their entries stay, skipped and
        counted at search (:attr:`dead`).
        """
        self._check(None, delete_kwargs)
        self._open_mode(None)
        for sid in self._ref_doc_ids(ref_doc_id):
            steps = self._deleting([], listed=functools.partial(self._ref_doc_nodes, sid))
            run(steps, write=lambda sid=sid: self._store.delete(sid, **delete_kwargs))

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Async :meth:`delete`."""
        self._check(None, delete_kwargs)
        await asyncio.to_thread(self._open_mode, None)
        for sid in await asyncio.to_thread(self._ref_doc_ids, ref_doc_id):
            steps = self._deleting([], listed=functools.partial(self._ref_doc_nodes, sid))
            await arun(steps, write=lambda sid=sid: self._store.adelete(sid, **delete_kwargs))

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Delete nodes by id (yours, mapped to the store's) or by a filter on plain fields.

        In an index mode the index forgets them after the store deleted them (by a filter alone: the nodes
        the store lists for it first, where it can).
        """
        self._check(filters, delete_kwargs)
        self._open_mode(None)
        store_ids = self._node_store_ids(node_ids)
        steps = self._deleting(store_ids or [], listed=self._listing(store_ids, filters))
        run(steps, write=lambda: self._store.delete_nodes(store_ids, filters, **delete_kwargs))

    async def adelete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Async :meth:`delete_nodes`."""
        self._check(filters, delete_kwargs)
        await asyncio.to_thread(self._open_mode, None)
        store_ids = await asyncio.to_thread(self._node_store_ids, node_ids)
        steps = self._deleting(store_ids or [], listed=self._listing(store_ids, filters))
        await arun(steps, write=lambda: self._store.adelete_nodes(store_ids, filters, **delete_kwargs))

    def _listing(self, store_ids: Sequence[Any] | None, filters: MetadataFilters | None) -> Any:
        """For a delete by a filter alone, what lists the shells it removes (asked only by an index mode)."""
        return functools.partial(self._filtered_nodes, filters) if store_ids is None and filters is not None else None

    def _deleting(self, store_ids: Sequence[Any], *, listed: Any = None) -> WriteSteps:
        """A delete (:func:`~textcrafter_rag.sealed.engine.delete_records`: the store first, then the tombstones
        of these store ids, or of those ``listed``, in the index modes)."""
        settle = functools.partial(self._marker, write=False)
        return delete_records(self._search, list(store_ids), listed=listed, settle=settle)

    def _clearing(self) -> WriteSteps:
        """A clear (:func:`~textcrafter_rag.sealed.engine.clear_records`)."""
        return clear_records(self._search, settle=functools.partial(self._marker, write=False))

    def _cleared(self) -> None:
        """The marker went with the store: the next write marks it again."""
        self._marker_checked = False
        self._ids_scheme = None

    def clear(self) -> None:
        """Clear the wrapped store, and the index (app-side or store-held) of every id it held.

        Other processes, writers included, follow a clear of the store-held index at their next read. Clear
        while no other process writes: a write that races the clear may be taken for a rollback by readers.
        """
        run(self._clearing(), write=self._store.clear)
        self._cleared()

    async def aclear(self) -> None:
        """Async :meth:`clear`."""
        await arun(self._clearing(), write=self._store.aclear)
        self._cleared()

    def rebuild_index(self, *, batch_size: int = 1_000, progress: bool = True) -> int:
        """Rebuild the store-held index from the sealed shells the wrapped store holds; how many were indexed.

        For a store whose log was lost, or whose shells were written without it. It only adds entries (never
        tombstones one), so it is safe while other processes write. Needs a store that can list its records
        (Qdrant, or a store whose ``get_nodes()`` returns every node).

        Raises:
            InvalidInputError: This store does not use the store-held index.
            NotImplementedError: The wrapped store cannot list its records.
        """
        self._open_mode(None)
        marker = functools.partial(self._marker, write=False)  # names the index's dimension
        return self._search.rebuild_index(batch_size=batch_size, progress=progress, before=marker)

    @property
    def dead(self) -> int:
        """Index entries a search read whose shells the store did not return (counted, never removed)."""
        return self._search.dead

    def compact_index(self) -> bool:
        """Compact the store-held index's log into one sealed snapshot now; whether one was written (see
        :func:`~textcrafter_rag.sealed.index_modes.compact_store_index`)."""
        self._open_mode(None)
        self._marker(write=False)  # the marker names the store-held index's dimension
        return compact_store_index(self._search.indexes)
