"""The sealed-search modes, one file each, and their registry.

Adding a mode is one new file (its options class and a :class:`~textcrafter_rag.sealed.engine.SearchMode`) and one
line in :data:`MODES`. The core (:class:`~textcrafter_rag.sealed.core.SealedSearch`) looks a mode up by its options
(:func:`mode_of`) or by the name a store's marker holds; each adapter looks its reader up by the mode's
``answered_by`` (the engine, or the wrapped store's own search), never by the mode's name.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidInputError, InvalidTypeError
from ..engine import SearchMode
from .app_index import APP_INDEX
from .candidates import CANDIDATES
from .single_stage import SINGLE_STAGE, SingleStageSearch
from .store_index import STORE_INDEX

__all__ = ["MODES", "SingleStageSearch", "check_parallel_load", "check_store", "mode_of"]

#: Every mode, by the name its records and marker carry.
MODES: dict[str, SearchMode] = {
    SINGLE_STAGE.name: SINGLE_STAGE,
    CANDIDATES.name: CANDIDATES,
    STORE_INDEX.name: STORE_INDEX,
    APP_INDEX.name: APP_INDEX,
}


def mode_of(options: Any) -> SearchMode:
    """The mode these options select (``None``: single-stage, the spelling the adapters accept for it).

    Raises:
        InvalidTypeError: The options are no mode's.
    """
    if options is None:
        return SINGLE_STAGE
    for mode in MODES.values():
        if isinstance(options, mode.options_type):
            return mode
    names = ", ".join(m.options_type.__name__ for m in MODES.values())
    raise InvalidTypeError(
        f"search options must be one of {names} (or None: single-stage), got {type(options).__name__}"
    )


def check_store(mode: SearchMode, *, store: str, reads_by_id: bool, reader: str, keeps_payloads: bool = True) -> None:
    """Refuse a mode the wrapped store cannot hold, before anything is sent to it (both adapters' one rule).

    The index modes read the records the index picks by id; every mode that seals the clean vector puts it in
    the record's payload.

    Args:
        mode: The mode asked for.
        store: The wrapped store's class name, for the message.
        reads_by_id: Whether the store reads records by id.
        reader: The framework's method that would read them, for the message (LangChain ``get_by_ids``).
        keeps_payloads: Whether the store keeps a record's text and metadata (LlamaIndex ``stores_text``).

    Raises:
        InvalidInputError: The store cannot hold the mode; the message names one it can.
    """
    if mode.keeps_index and not reads_by_id:
        raise InvalidInputError(
            f"an index mode reads records by id, and {store} cannot ({reader}): search this store with candidates "
            "(search=TwoStageSearch()); what each mode leaves to the store: docs/sealed_search.md"
        )
    if mode.seals_vectors and not keeps_payloads:
        raise InvalidInputError(
            f"sealed search needs a vector store that keeps payloads; {store} keeps only vectors, so the sealed "
            "clean vectors would have nowhere to go"
        )


def check_parallel_load(options: Any) -> None:
    """Refuse a mode that a parallel bulk load (several writer processes, given clean vectors) cannot write.

    A load writes from several processes at once, which the app-side index file does not take (one writer), and
    hands the store the vectors it is given, which single-stage would store as they are (clean).

    Raises:
        InvalidInputError: The mode is the app-side index or single-stage.
    """
    mode = mode_of(options)
    if not (mode.parallel_writers and mode.seals_vectors):
        raise InvalidInputError(
            "a parallel load writes from several processes: search must be StoreIndexSearch (the store-held index, "
            "whose log takes many writers) or TwoStageSearch; the app-side index file holds one writer, and "
            f"single-stage stores the vectors it is given, got {type(options).__name__}"
        )
