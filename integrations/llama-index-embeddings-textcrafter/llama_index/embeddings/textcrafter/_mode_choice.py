"""The search mode a LlamaIndex :class:`~.sealed_vector_store.SealedVectorStore` is built with.

A new store gets the strongest mode its wrapped store allows: the store-held index where the store keeps
payloads and reads by id (the store then ranks nothing), else single-stage, said once per store class with a
:class:`~textcrafter_rag.sealed_search.StoreRanksWarning` so that nobody gets the weaker mode unawares. A
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
from textcrafter_rag.app_index import AppIndexSearch
from textcrafter_rag.deprecation import warn_renamed
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealed_search import SealedSearch, SearchOptions, StoreRanksWarning, UnprotectedVectorsWarning
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.two_stage import TwoStageSearch

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


def default_search(store: BasePydanticVectorStore) -> StoreIndexSearch | None:
    """The mode a new store gets when neither ``search=`` nor ``fetch_k=`` is given.

    The store-held index (:class:`~textcrafter_rag.sealed.StoreIndexSearch`) where the store keeps payloads
    and reads by id: the store then ranks nothing and learns no vector of any text, and every process with
    the key searches it. Elsewhere single-stage (``None``: the store ranks the nodes' embeddings, which a
    ``ProtectedEmbedding`` protects), said once per store class with a :class:`StoreRanksWarning`.
    """
    if reads_by_id(store):
        return StoreIndexSearch()
    name = type(store).__name__
    with _WARNED_LOCK:
        first = name not in _WARNED
        _WARNED.add(name)
    if first:
        warnings.warn(
            f"{name} cannot read nodes by id (get_nodes(node_ids=...)) or keeps no payloads, so the default "
            "store-held index (search=StoreIndexSearch()) is not possible: this store ranks the nodes' "
            "embeddings itself (protected vectors, with ProtectedEmbedding). Pass search=None to choose "
            "this explicitly",
            StoreRanksWarning,
            stacklevel=4,
        )
    return None


def named_search(fetch_k: int | TwoStageSearch | None, search: SearchOptions | None) -> SearchOptions | None:
    """The mode the caller named: ``search=`` itself, or candidate search for the deprecated ``fetch_k=`` (warned).

    Never both. The warning points at the caller of the store's constructor.
    """
    if search is _FROM_FETCH_K:
        warn_renamed("SealedVectorStore(fetch_k=...)", "search=TwoStageSearch(open_k=...)", stacklevel=4)
        return TwoStageSearch.of(fetch_k)
    if fetch_k is not None:
        raise InvalidInputError("give either fetch_k= or search=, not both")
    return search


def check_search(store: BasePydanticVectorStore, search: SearchOptions | None, embed_model: Any) -> None:
    """Refuse a mode this store cannot hold, before anything is sent to it.

    The index modes read shells by id, and every sealed mode puts the sealed clean vector in the payload;
    ``embed_model=`` only serves sealed search (a single-stage store ranks the query the index embeds).
    """
    if search is not None and not isinstance(search, (StoreIndexSearch, TwoStageSearch, AppIndexSearch)):
        raise InvalidTypeError(
            "search must be a StoreIndexSearch, a TwoStageSearch, an AppIndexSearch or None, "
            f"got {type(search).__name__}"
        )
    if isinstance(search, StoreIndexSearch) and not reads_by_id(store):
        raise InvalidInputError(
            f"the store-held index reads records by id, and {type(store).__name__} cannot (get_nodes with "
            "node_ids, through a sync client); what each other mode leaves to the store: docs/sealed_search.md"
        )
    if search is not None and not store.stores_text:
        raise InvalidInputError(
            f"sealed search needs a vector store that keeps payloads; {type(store).__name__} keeps only "
            "vectors (stores_text=False), so the sealed clean vectors would have nowhere to go"
        )
    if embed_model is not None and search is None:
        raise InvalidInputError("embed_model= is for sealed search (search=...): single-stage stores rank")


def reading_model(embed_model: Any, search: SearchOptions | None, key: SecretKey) -> tuple[Any, bool]:
    """The model the store embeds queries with, and whether it re-reads node vectors through it.

    The embeddings contract of both adapters: a sealed store reads a protected model through its base encoder
    (LangChain's ``SealedVectorStore(embedding=ProtectedEmbeddings(...))`` likewise), since the store protects
    what it sends and the mechanism's noise would only blur the exact ranking; its key, if any, must be the
    store's. So a ``ProtectedEmbedding`` given as ``embed_model=`` becomes its :meth:`~.base.ProtectedEmbedding.sealed`
    twin, and the node vectors it made (the index embeds with it too) are re-read through that twin.
    """
    if search is None or not isinstance(embed_model, ProtectedEmbedding):
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
) -> Callable[[SearchOptions | None], SealedSearch | None]:
    """What builds the core for a mode's options (``None``: single-stage, no core).

    A closure over the construction's arguments, so the store rebuilds its core the same way whenever the
    mode or the writer changes (a store written before in another mode, a clear); the store-held index gets
    the port to the wrapped store, where its log lives.
    """

    def new_search(options: SearchOptions | None) -> SealedSearch | None:
        if options is None:
            return None
        core = SealedSearch(secret, tenant=tenant, options=options, strict=strict)
        if core.mode == "store-index":
            core.attach(port)
            if isinstance(options, StoreIndexSearch) and options.replica:  # a query then reads no shell
                core.replicate(port.get_nodes, shell_fields)
        return core

    return new_search
