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
from collections.abc import Callable
from typing import Any

from llama_index.core.vector_stores.types import BasePydanticVectorStore

from textcrafter_rag.deprecation import warn_renamed
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch, SearchOptions, StoreRanksWarning
from textcrafter_rag.sealed.modes import SingleStageSearch, check_store, mode_of
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import SecretKey

from ._port import LlamaIndexPort, reads_by_id
from ._sealed_steps import shell_fields

__all__ = ["check_search", "default_search", "named_search", "search_factory"]

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


def check_search(store: BasePydanticVectorStore, search: SearchOptions) -> None:
    """Refuse a mode this store cannot hold, before anything is sent to it: the index modes read shells by id,
    and every sealed mode puts the sealed clean vector in the payload
    (:func:`textcrafter_rag.sealed.modes.check_store`).
    """
    check_store(
        mode_of(search),
        store=type(store).__name__,
        reads_by_id=reads_by_id(store),
        reader="get_nodes with node_ids, through a sync client",
        keeps_payloads=store.stores_text,
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
        core.attach(port, fetch=port.get_nodes, fields=shell_fields)  # the store-held index's log lives there
        return core

    return new_search
