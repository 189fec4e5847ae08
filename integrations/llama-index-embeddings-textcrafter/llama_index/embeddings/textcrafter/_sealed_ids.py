"""Node and source-document ids of the LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore`.

By default (``record_ids="keyed"``) the wrapped store holds each shell under the keyed id of its node, and the
source document's keyed id as its ``ref_doc_id``
(:meth:`textcrafter_rag.sealed.records.RecordSealer.keyed_id`: UUIDs that name nothing); the node itself, with
your ids, is sealed inside. These steps map the ids a caller gives (``get_nodes``, ``delete_nodes``,
``delete(ref_doc_id)``) to the store's. A store may also hold shells under the other scheme's ids (written by
the previous release, whose ids were clear, or with ``record_ids="clear"``). A keyed or sealed store looks them
up (a miss retried under the clear id, ``delete(ref_doc_id)`` and a retriever's ``doc_ids`` under both) only
when the caller says the store may hold them (``legacy_clear_ids=True``): each such lookup hands the store the
user's id, so nothing the store holds (a marker it can delete or edit) turns it on. A clear reader looks up
keyed ids, which name nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters, VectorStoreQuery

from textcrafter_rag.sealed.record_ids import check_writable
from textcrafter_rag.sealed.records import ID_FIELD, IDS_KEY, RecordSealer, canonical_record_id

__all__ = ["SealedNodeIds"]


class SealedNodeIds:
    """The id mapping steps of the sealed vector store (mixed into it)."""

    _store: BasePydanticVectorStore
    _records: RecordSealer
    _marker_id: str
    _ids_scheme: str | None

    @property
    def record_ids(self) -> str:
        """``"keyed"``, ``"sealed"`` (a store that keeps no text: ids the key turns back) or ``"clear"`` (your ids)."""
        return self._records.record_ids

    def store_ids(self, node_ids: Sequence[Any]) -> list[Any]:
        """The ids the wrapped store holds shells of these node (or source document) ids under when written here.

        For reading :attr:`store` directly; every method of the sealed store takes your ids.
        """
        return [self._records.store_id(i) for i in node_ids]

    @staticmethod
    def _shell_ids(shells: Sequence[BaseNode]) -> set[str]:
        return {canonical_record_id((s.metadata or {}).get(ID_FIELD, s.node_id)) for s in shells}

    def _lookups(self, node_ids: Sequence[Any], found: Sequence[BaseNode]) -> list[Any]:
        """The other scheme's ids of the nodes not found under this scheme's (none if the store is keyed only)."""
        if self._knows_keyed_only():
            return []
        got = self._shell_ids(found)
        return [
            self._records.other_store_id(i)
            for i in node_ids
            if canonical_record_id(self._records.store_id(i)) not in got
        ]

    def _find_shells(self, node_ids: Sequence[Any], filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The shells of these node ids: under this scheme's store ids, else the other's."""
        found = list(self._store.get_nodes([self._records.store_id(i) for i in node_ids], filters))
        missing = self._lookups(node_ids, found)
        return found + (list(self._store.get_nodes(missing, filters)) if missing else [])

    async def _afind_shells(self, node_ids: Sequence[Any], filters: MetadataFilters | None = None) -> list[BaseNode]:
        """Async :meth:`_find_shells`."""
        found = list(await self._store.aget_nodes([self._records.store_id(i) for i in node_ids], filters))
        missing = self._lookups(node_ids, found)
        return found + (list(await self._store.aget_nodes(missing, filters)) if missing else [])

    def _mapped_query(self, query: VectorStoreQuery) -> VectorStoreQuery:
        """``query`` with its ``node_ids`` and ``doc_ids`` (the retriever sets them) as the store holds them."""
        if not query.node_ids and not query.doc_ids:
            return query
        return dataclasses.replace(
            query, node_ids=self._held_ids(query.node_ids), doc_ids=self._held_ids(query.doc_ids)
        )

    def _held_ids(self, ids: Sequence[Any] | None) -> list[Any] | None:
        """Every id a record of these ids may be held under: this scheme's, and (unless known) the other's."""
        if not ids:
            return list(ids) if ids is not None else None
        out = [self._records.store_id(i) for i in ids]
        if not self._knows_keyed_only():
            out += [o for o in (self._records.other_store_id(i) for i in ids) if o not in out]
        return out

    def _node_store_ids(self, node_ids: Sequence[Any] | None) -> list[Any] | None:
        """The store ids to delete for these node ids (both schemes' where the store cannot read by id)."""
        if node_ids is None:
            return None
        try:
            found = self._find_shells(node_ids)
        except Exception:  # no read by id (FAISS, some clients): under both schemes' ids, where both may be sent
            other = [] if self._knows_keyed_only() else [self._records.other_store_id(i) for i in node_ids]
            return [self._records.store_id(i) for i in node_ids] + other
        got = self._shell_ids(found)
        out = []
        for uid in node_ids:
            sid, other = self._records.store_id(uid), self._records.other_store_id(uid)
            out.append(other if canonical_record_id(sid) not in got and canonical_record_id(other) in got else sid)
        return out

    def _ref_doc_ids(self, ref_doc_id: str) -> list[Any]:
        """The ``ref_doc_id`` values a source document's shells may carry: this scheme's, and maybe the other's."""
        sid, other = self._records.store_id(ref_doc_id), self._records.other_store_id(ref_doc_id)
        return [sid] if self._knows_keyed_only() or other == sid else [sid, other]

    def _marker_scheme(self) -> str | None:
        """The id scheme the marker names (``None``: no marker read; ``"clear"``: written before ids were keyed)."""
        if self._ids_scheme is None:
            try:
                marker = self._store.get_nodes(node_ids=[self._marker_id])
            except Exception:  # no read by id, no collection yet: not known
                return None
            if marker:
                self._ids_scheme = str((marker[0].metadata or {}).get(IDS_KEY, "clear"))
        return self._ids_scheme

    def _knows_keyed_only(self) -> bool:
        """Whether a missed id is never looked up under the other scheme's id (a clear one): by the caller's option.

        Not by the marker: its plain ``_tc_ids`` is whatever the host says, single-stage stores write none, and
        stores that keep no text hold sealed ids, which it never named.
        """
        return not self._records.ids.looks_up_other

    def _check_writable(self) -> None:
        """Refuse clear ids in a store whose marker says keyed ids only (see ``check_writable``)."""
        check_writable(self._records.record_ids, self._marker_scheme())

    def _added_ids(self, returned: Sequence[Any], shells: Sequence[BaseNode], nodes: Sequence[BaseNode]) -> list[Any]:
        """What ``add`` returns: the wrapped store's ids, your node ids where they are the shells' keyed ids."""
        back = {canonical_record_id(s.node_id): n.node_id for s, n in zip(shells, nodes, strict=True)}
        return [back.get(canonical_record_id(r), r) for r in returned]
