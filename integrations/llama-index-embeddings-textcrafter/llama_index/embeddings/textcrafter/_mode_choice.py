"""The search mode a LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore` is built with.

A new store gets the strongest mode its wrapped store allows, as LangChain's does: the store-held index where the
store keeps payloads and reads by id (the store then ranks nothing), else the candidate rounds where it keeps
payloads, else single-stage; a fallback is said once per store class with a
:class:`~textcrafter_rag.sealed.core.StoreRanksWarning` so that nobody gets a weaker mode unawares. A
mode the caller names (``search=``, or the deprecated ``fetch_k=``) is checked against the store here, before
anything is sent to it. Construction never reads the store: a store written before in another mode is recognised at its
first use (``_open_mode`` in :mod:`._sealed_steps`), and only when the mode was defaulted, never when the
caller chose it; the core is then rebuilt by the factory made here (:func:`search_factory`), as it is after
a clear (a new writer of the store-held index).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from textcrafter_rag.adapters import check_sealed_key
from textcrafter_rag.deprecation import warn_renamed
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch, SearchOptions, StoreRanksWarning, UnprotectedVectorsWarning
from textcrafter_rag.sealed.modes import SingleStageSearch, mode_of
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import SecretKey

from ._port import LlamaIndexPort, reads_by_id
from ._sealed_steps import shell_fields
from .base import ProtectedEmbedding
from .instrumentation import PROTECTED_VECTORS, SILENT_VECTORS

__all__ = ["check_search", "clean_node_vectors", "default_search", "named_search", "reading_model", "search_factory"]

#: ``search=`` left out: the mode ``fetch_k`` names (single-stage by default).
_FROM_FETCH_K: Any = object()
#: Store classes already warned about in this process (:class:`StoreRanksWarning` is said once per class).
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def default_search(store: BasePydanticVectorStore) -> SearchOptions:
    """The mode a new store gets when neither ``search=`` nor ``fetch_k=`` is given.

    The store-held index (:class:`~textcrafter_rag.sealed.StoreIndexSearch`) where the store keeps payloads
    and reads by id: the store then ranks nothing and learns no vector of any text, and every process with
    the key searches it. Elsewhere the candidate rounds (:data:`~textcrafter_rag.sealed.candidates.DEFAULT_SEARCH`:
    the store ranks heavily noised vectors) where it keeps payloads, as LangChain's sealed store does, else
    single-stage (the store ranks the nodes' embeddings, which a ``ProtectedEmbedding`` protects); a fallback
    is said once per store class with a :class:`StoreRanksWarning`.
    """
    if reads_by_id(store):
        return StoreIndexSearch()
    fallback: SearchOptions = DEFAULT_SEARCH if store.stores_text else SingleStageSearch()
    name = type(store).__name__
    with _WARNED_LOCK:
        first = name not in _WARNED
        _WARNED.add(name)
    if first:
        warnings.warn(
            f"{name} cannot read nodes by id (get_nodes(node_ids=...)) or keeps no payloads, so the default "
            "store-held index (search=StoreIndexSearch()) is not possible: "
            + (
                "sealed search falls back to candidates: the store ranks heavily noised vectors, which an attacker "
                "who can have its own texts stored can compare with (see SECURITY.md)"
                if store.stores_text
                else "this store ranks the nodes' embeddings itself (protected vectors, with ProtectedEmbedding)"
            )
            + "; pass search= to choose a mode and silence this",
            StoreRanksWarning,
            stacklevel=4,
        )
    return fallback


def named_search(fetch_k: int | TwoStageSearch | None, search: SearchOptions | None) -> SearchOptions:
    """The mode the caller named: ``search=`` itself (``None``: single-stage), or candidate search for the
    deprecated ``fetch_k=`` (warned).

    Never both. The warning points at the caller of the store's constructor.
    """
    if search is _FROM_FETCH_K:
        warn_renamed("SealedVectorStore(fetch_k=...)", "search=TwoStageSearch(open_k=...)", stacklevel=4)
        options = TwoStageSearch.of(fetch_k)
        return SingleStageSearch() if options is None else options
    if fetch_k is not None:
        raise InvalidInputError("give either fetch_k= or search=, not both")
    return SingleStageSearch() if search is None else search


def check_search(store: BasePydanticVectorStore, search: SearchOptions, embed_model: Any) -> None:
    """Refuse a mode this store cannot hold, before anything is sent to it.

    The index modes read shells by id, and every sealed mode puts the sealed clean vector in the payload;
    ``embed_model=`` only serves sealed search (a single-stage store ranks the query the index embeds).
    """
    mode = mode_of(search)
    if mode.keeps_index and not reads_by_id(store):
        raise InvalidInputError(
            f"an index mode reads records by id, and {type(store).__name__} cannot (get_nodes with "
            "node_ids, through a sync client); what each other mode leaves to the store: docs/sealed_search.md"
        )
    if mode.seals_vectors and not store.stores_text:
        raise InvalidInputError(
            f"sealed search needs a vector store that keeps payloads; {type(store).__name__} keeps only "
            "vectors (stores_text=False), so the sealed clean vectors would have nowhere to go"
        )
    if embed_model is not None and mode.store_ranks:
        raise InvalidInputError("embed_model= is for sealed search (search=...): single-stage stores rank")


def reading_model(embed_model: Any, search: SearchOptions, key: SecretKey) -> tuple[Any, bool]:
    """The model the store embeds queries with, and whether it re-reads node vectors through it.

    The embeddings contract of both adapters: a sealed store reads a protected model through its base encoder
    (LangChain's ``SealedVectorStore(embedding=ProtectedEmbeddings(...))`` likewise), since the store protects
    what it sends and the mechanism's noise would only blur the exact ranking; its key, if any, must be the
    store's. So a ``ProtectedEmbedding`` given as ``embed_model=`` becomes its :meth:`~.base.ProtectedEmbedding.sealed`
    twin, and the node vectors it made (the index embeds with it too) are re-read through that twin.
    """
    if mode_of(search).store_ranks or not isinstance(embed_model, ProtectedEmbedding):
        return embed_model, False
    check_sealed_key(embed_model.protector, key)
    return embed_model.sealed(), True


def clean_node_vectors(nodes: Sequence[BaseNode], embed_model: Any, reread: bool) -> list[Any]:
    """The clean vectors of ``nodes``: their embeddings, or the reading model's of the texts the index embedded.

    Re-read (``reread``) only where some came from no ``SealedEmbedding``: an index that embeds with the
    ``ProtectedEmbedding`` the store reads through hands it protected vectors; one that embeds with its
    ``sealed()`` twin hands it the clean ones already, and nothing is embedded twice.
    """
    vectors = [n.embedding for n in nodes]
    if reread and SILENT_VECTORS.unknown(vectors):
        return embed_model._get_text_embeddings([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    return vectors


def warn_unprotected(nodes: Sequence[BaseNode]) -> None:
    """Single-stage: warn when the store is handed vectors no ``ProtectedEmbedding`` of this process made.

    The store ranks (and holds) these vectors themselves; clean ones are what an inverter reads. Vectors made
    in another process, or long before, are not recognised either: filter the warning then.
    """
    vectors = [n.embedding for n in nodes if n.embedding is not None]
    unknown = PROTECTED_VECTORS.unknown(vectors) if vectors else 0
    if unknown:
        warnings.warn(
            f"single-stage search (search=None): {unknown} of {len(vectors)} vectors came from no ProtectedEmbedding "
            "of this process, and the store ranks and holds them as they are; embed with ProtectedEmbedding(base=...) "
            "or leave search= out",
            UnprotectedVectorsWarning,
            stacklevel=3,
        )


def search_factory(
    secret: SecretKey, *, tenant: str, strict: bool, port: LlamaIndexPort
) -> Callable[[SearchOptions], SealedSearch]:
    """What builds the core for a mode's options.

    A closure over the construction's arguments, so the store rebuilds its core the same way whenever the
    mode or the writer changes (a store written before in another mode, a clear); the store-held index gets
    the port to the wrapped store, where its log lives.
    """

    def new_search(options: SearchOptions) -> SealedSearch:
        core = SealedSearch(secret, tenant=tenant, options=options, strict=strict)
        core.attach(port)  # the index modes keep it (the store-held index's log lives there)
        if core.indexes is not None and core.indexes.replica is not None:  # a query then reads no shell
            core.replicate(port.get_nodes, shell_fields)
        return core

    return new_search
