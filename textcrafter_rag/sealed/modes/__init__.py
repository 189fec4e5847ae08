"""The sealed-search modes, one file each, and their registry.

Adding a mode is one new file (its options class and a :class:`~textcrafter_rag.sealed.engine.SearchMode`) and one
line in :data:`MODES`. The core (:class:`~textcrafter_rag.sealed.core.SealedSearch`) looks a mode up by its options
(:func:`mode_of`) or by the name a store's marker holds; the adapters ask the mode's capabilities
(``store_ranks``, ``keeps_index``), never its name.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidTypeError
from ..engine import SearchMode
from .app_index import APP_INDEX
from .candidates import CANDIDATES
from .single_stage import SINGLE_STAGE, SingleStageSearch
from .store_index import STORE_INDEX

__all__ = ["MODES", "SingleStageSearch", "mode_of"]

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
