"""The sealed-search steps of the LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore`, split by role.

The mode marker (and, for a store opened with the default mode, the mode it was written in), the clean
query's checks, what the store is asked (a protected query for candidates, or ids from the store-held or
app-side index), and the exact re-rank of the opened shells. The store class holds the
LlamaIndex protocol (add, query; deletes and clears in :mod:`._index_upkeep`) and the sealing of nodes; these
steps translate shells for the framework-free core, :class:`textcrafter_rag.sealed.core.SealedSearch`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.logs import SearchCounters
from textcrafter_rag.sealed.candidates import VECTOR_KEY
from textcrafter_rag.sealed.core import (
    MODE_KEY,
    SealedSearch,
    SearchOptions,
    logger,
)
from textcrafter_rag.sealed.engine import Found, Query, Steps, marker_record, settle_marker
from textcrafter_rag.sealed.layout import is_library_record
from textcrafter_rag.sealed.marker import StoreMarker
from textcrafter_rag.sealed.modes import MODES
from textcrafter_rag.sealed.records import ID_FIELD, RecordSealer, canonical_record_id
from textcrafter_rag.sealing import SealError

from ._port import LlamaIndexPort, node_records
from .instrumentation import warn_unless_silent

__all__ = ["Hit", "SealedSearchSteps", "shell_fields"]

#: One shell the store returned, with the id it returned it under (``None`` if it gave none).
Hit = tuple[BaseNode, Any]
#: Records a store opened with the default mode is probed with, when it has no marker.
_PROBE_K = 10


def shell_fields(hits: Sequence[Any]) -> list[tuple[Any, Any, Any, Any, Any]]:
    """What the core opens of a search's hits: shells read by id (the index modes, the replica's check of each
    against the index log) or ``(shell, store id)`` pairs (candidates)."""
    return SealedSearchSteps._hit_fields([h if isinstance(h, tuple) else (h, None) for h in hits])


class SealedSearchSteps(SearchCounters):
    """Steps of sealed search over a wrapped LlamaIndex store (mixed into the sealed vector store)."""

    _search: SealedSearch
    _store: BasePydanticVectorStore
    _records: RecordSealer
    _marker_id: str
    #: The marker's id and sealed text; the mode is read from the text, never from the host's plain field.
    _store_marker: StoreMarker
    _marker_checked: bool
    _port: LlamaIndexPort
    _new_search: Callable[[SearchOptions], SealedSearch]
    _adopt: bool

    # ``open_node`` (a shell opened into its node) is the sealed vector store's own method.

    def _open_mode(self, dim: int | None) -> None:
        """A store opened with the default mode takes the mode it was written in, before anything is sent.

        Its marker record names the mode (sealed modes write one). A store without a marker is probed
        (``dim`` known): a few records the store returns for a keyed random vector; if one of them is a shell
        of this key and tenant, the store was written before, in the mode that shell names (single-stage
        writes no marker), else it is new and keeps the default. Without ``dim`` and a marker it is decided
        later; a caller's explicit mode is never replaced (a mismatch raises at the marker check).
        """
        if not self._adopt:
            return
        marker = self._port.get([self._marker_id])
        if marker:
            mode = self._store_marker.mode(marker[0].fields, marker[0].text)  # sealed: a forged field is refused
        elif dim is None:
            return
        else:
            mode = self._probed_mode(dim)
        self._adopt = False
        if mode in MODES and mode != self._search.mode:
            logger.info("opening a store written in %r mode in that mode (no search= given)", mode)
            self._search = self._new_search(MODES[mode].reopened())
            self._marker_checked = False

    def _probed_mode(self, dim: int) -> str | None:
        """The mode the first shell of this key and tenant among a few the store returns was written in."""
        probe = self._search.keyed_vectors(["probe"], dim)[0].tolist()
        for node, store_id in self._port.search_nodes(probe, _PROBE_K):
            meta = node.metadata or {}
            if is_library_record(meta):
                continue
            try:
                self.open_node(node, store_id=store_id)
            except (SealError, ValueError, KeyError, TypeError):
                continue  # another tenant's record, or not a shell
            return str(meta.get(MODE_KEY, "single"))
        return None

    def _marker_node(self, dim: int) -> TextNode:
        scheme = self._records.record_ids
        text, fields, vector = marker_record(self._search, self._marker_id, ids_scheme=scheme, dim=dim)
        return TextNode(id_=self._marker_id, text=text, metadata=fields, embedding=vector)

    def _settle_marker(self, found: Sequence[BaseNode] | None, *, write: bool) -> bool:
        """Check a marker read back (``None``: unreadable); ``True`` if a marker must be written now."""
        if found is None:
            return False
        written = self._store_marker.mode(found[0].metadata or {}, found[0].get_content()) if found else None
        settle_marker(self._search, written, found[0].metadata if found else None)
        if found:
            self._marker_checked = True
            return False
        return write

    def _marker(self, *, write: bool, dim: int | None = None) -> None:
        """Refuse a store written in another mode before anything is sent; after a write, mark a new store.

        Best effort: a store that cannot read by id (or whose collection does not exist yet) is checked
        again next time, and each hit's own ``_tc_mode`` field is checked regardless.
        """
        if self._marker_checked:
            return
        try:
            found: Sequence[BaseNode] | None = self._store.get_nodes(node_ids=[self._marker_id])
        except Exception:  # no read by id, no collection yet, an async-only client: the hits' fields decide
            found = None
        if self._settle_marker(found, write=write) and dim is not None:
            self._store.add([self._marker_node(dim)])
            self._marker_checked = True

    async def _amarker(self, *, write: bool, dim: int | None = None) -> None:
        """Async :meth:`_marker` (through the store's async client)."""
        if self._marker_checked:
            return
        try:
            found: Sequence[BaseNode] | None = await self._store.aget_nodes(node_ids=[self._marker_id])
        except Exception:  # as in _marker
            found = None
        if self._settle_marker(found, write=write) and dim is not None:
            await self._store.async_add([self._marker_node(dim)])
            self._marker_checked = True

    def _clean_query(self, query: VectorStoreQuery) -> np.ndarray:
        """The validated clean query of a sealed search (it never leaves this process)."""
        if query.query_embedding is None:
            raise InvalidInputError("sealed search needs a query embedding (text-only modes cannot be re-ranked)")
        if query.mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            raise InvalidInputError(f"sealed search supports the default and MMR modes, not {query.mode.value!r}")
        self._search.check_k(query.similarity_top_k)
        clean = self._search.check_vectors(np.asarray(query.query_embedding).reshape(1, -1), name="query vector")
        warn_unless_silent([query.query_embedding], what="query embeddings", stacklevel=5)
        return clean[0]

    @staticmethod
    def _candidate_query(query: VectorStoreQuery, protected: list[float], k: int) -> VectorStoreQuery:
        """What the store is asked in a round of candidate search: the protected query, for ``k`` shells.

        The query text (``query_str``, the only free-text field of a ``VectorStoreQuery``) is cleared: the
        store ranks the protected vector and needs no text, and the clean question would undo the protection
        of every round's vector (a store may log or index what it is asked).
        """
        return dataclasses.replace(
            query, query_embedding=protected, query_str=None, similarity_top_k=k, mode=VectorStoreQueryMode.DEFAULT
        )

    @staticmethod
    def _hits(result: VectorStoreQueryResult) -> list[Hit]:
        """A store's answer as ``(shell, store id)`` pairs (ids only when the store gave one per shell)."""
        shells = list(result.nodes or [])
        ids = list(result.ids) if result.ids and len(result.ids) == len(shells) else [None] * len(shells)
        return list(zip(shells, ids, strict=True))

    @staticmethod
    def _hit_fields(hits: Sequence[Hit]) -> list[tuple[Any, Any, Any, Any, Any]]:
        """What the core opens of each hit (see :meth:`~textcrafter_rag.sealed.core.SealedSearch.open_hits`)."""
        return [
            (
                store_id,
                (s.metadata or {}).get(ID_FIELD, s.node_id),
                (s.metadata or {}).get(VECTOR_KEY),
                (s.metadata or {}).get(MODE_KEY),
                getattr(s, "text", None),
            )
            for s, store_id in hits
        ]

    def _find(self, query: VectorStoreQuery, clean: np.ndarray, kwargs: Mapping[str, Any]) -> Steps:
        """The mode's search (:mod:`textcrafter_rag.sealed.engine`): a protected query in rounds (hits are
        ``(shell, store id)`` pairs), or shells read by id, from the replica if the store keeps one.

        In an index mode ``node_ids`` (the retriever's, mapped to the store's ids) are read themselves, all of
        them, and ranked exactly: a search among named nodes is complete, not limited to the index's best
        ``open_k``; ``doc_ids`` restrict what was read (:meth:`_restricted`). A search that keeps every record
        read of the index's pick and ranks the best ``similarity_top_k`` (no ``doc_ids``, not MMR, which ranks all
        it reads) reads little more than those while the index is exact (:meth:`IndexModes.plan`).
        """
        core = self._search
        named = [str(i) for i in query.node_ids] if query.node_ids else None
        whole = named or query.doc_ids or query.mode == VectorStoreQueryMode.MMR
        keep = functools.partial(self._restricted, query) if whole else None
        store_args = (("filters",) if query.filters is not None else ()) + tuple(sorted(kwargs))
        k = query.similarity_top_k
        found = Query(clean, k, shell_fields, ids=named, keep=keep, store_args=store_args, records=node_records)
        return core.search_mode.find(core, found)  # candidates: the store applies ids and filters itself

    @staticmethod
    def _as_hits(found: Found[Any]) -> Found[Hit]:
        """An index search's shells as the ``(shell, store id)`` pairs a candidate search reads."""
        if found.hits and isinstance(found.hits[0], tuple):
            return found
        return Found([(s, None) for s in found.hits], found.positions, found.record_ids, found.vectors)

    def _restricted(self, query: VectorStoreQuery, shells: Sequence[BaseNode]) -> list[BaseNode]:
        """The shells of the query's source documents (``doc_ids``), if it names any; never more than ``open_k``.

        In an index mode ``doc_ids`` restrict the ``open_k`` candidates the index picked (or the named
        ``node_ids``): fewer than ``similarity_top_k`` may come back when the documents' nodes rank below
        the index's best ``open_k``; raise ``open_k`` then.
        """
        out = list(shells)
        if query.doc_ids:
            docs = {canonical_record_id(d) for d in query.doc_ids}
            out = [s for s in out if s.ref_doc_id is not None and canonical_record_id(s.ref_doc_id) in docs]
        if len(out) > self._search.open_k:
            raise InvalidInputError(
                f"the query names {len(out)} nodes, more than this store's open_k={self._search.open_k} that a "
                "search opens and ranks: raise open_k, or name fewer node_ids"
            )
        return out

    def _ref_doc_nodes(self, ref_doc_id: Any) -> list[str]:
        """The store ids of a source document's shells (held under ``ref_doc_id``), for the index to forget.

        Read with a filter on ``ref_doc_id`` (the field LlamaIndex stores beside every node); a store that
        cannot filter so answers nothing here, and the entries stay, skipped and counted at search.
        """
        want = canonical_record_id(ref_doc_id)
        flt = MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value=str(ref_doc_id))])
        return [
            n.node_id
            for n in self._listed(flt)
            if n.ref_doc_id is not None and canonical_record_id(n.ref_doc_id) == want
        ]

    def _filtered_nodes(self, filters: MetadataFilters) -> list[str]:
        """The store ids of the shells a filter on plain fields matches (a delete by filter alone)."""
        return [n.node_id for n in self._listed(filters)]

    def _listed(self, filters: MetadataFilters) -> list[BaseNode]:
        """The shells the store lists for a filter (``[]`` where it cannot, logged: entries then stay, counted)."""
        try:
            nodes = self._store.get_nodes(filters=filters)
        except Exception:  # no filtered listing: the entries are skipped and counted at search instead
            logger.info("the store cannot list the nodes a delete removes: their index entries stay (skipped)")
            return []
        return [n for n in nodes if not is_library_record(n.metadata)]

    def _ranked(self, query: VectorStoreQuery, clean: np.ndarray, opened: Found) -> VectorStoreQueryResult:
        """Rank the opened shells exactly (or by MMR), open the winners only.

        The results carry no embedding: LlamaIndex hands them to retrieval events, callbacks and spans.
        """
        if not opened.positions:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        k = query.similarity_top_k
        if query.mode == VectorStoreQueryMode.MMR:
            scores, order = get_top_k_mmr_embeddings(
                clean.tolist(),
                opened.vectors.tolist(),
                similarity_top_k=k,
                embedding_ids=list(range(len(opened.positions))),
                mmr_threshold=query.mmr_threshold,
            )
        else:
            ranked = self._search.rank(clean, opened.vectors, len(opened.positions))
            order, scores = [i for i, _ in ranked], [s for _, s in ranked]

        def opened_node(i: int) -> tuple[BaseNode, int]:
            shell, store_id = opened.hits[opened.positions[i]]
            node = self.open_node(shell, store_id=store_id)
            node.embedding = None
            return node, i

        kept = self._search.first_that_open(list(zip(order, scores, strict=True)), opened_node, k)
        return VectorStoreQueryResult(
            nodes=[node for (node, _), _ in kept],
            similarities=[float(score) for _, score in kept],
            ids=[node.node_id for (node, _), _ in kept],  # your node ids (the store's are keyed)
        )
