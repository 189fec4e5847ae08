"""The record layout of sealed search: every plain ``_tc_*`` field the core writes, defined once.

Both adapters reserve these names (a user's metadata may not use them) and read them back by these constants.
The library also keeps records of its own in the user's store (the marker, the index log's heads and segments);
:func:`is_library_record` is the one test of them, so no path hands one to a user's filter or returns one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .filters import is_filter_kwarg

__all__ = [
    "CHUNKS_FIELD",
    "DIM_KEY",
    "INDEX_MODES",
    "LIBRARY_FIELDS",
    "LOG_FIELD",
    "MARKER_KEY",
    "MODE_KEY",
    "RESERVED_FIELDS",
    "guarded_filters",
    "is_library_record",
    "without_library_records",
]

#: The plain metadata key naming the mode a record was written in.
MODE_KEY = "_tc_mode"
#: The plain metadata key of the marker record (its value is the mode).
MARKER_KEY = "_tc_marker"
#: The marker record's plain field holding the store's vector dimension (the store sees it in every vector).
DIM_KEY = "_tc_dim"
#: Plain field of every index log record: ``"head"`` or ``"seg"`` (data records never carry it).
LOG_FIELD = "_tc_log"
#: Plain field of an index log segment's first chunk: how many chunks the segment has.
CHUNKS_FIELD = "_tc_chunks"
#: The modes whose store ranks nothing: the application's index picks the records to fetch by id.
INDEX_MODES = ("store-index", "index")
#: Fields the sealed stores add to records (besides the sealed vector, ``candidates.VECTOR_KEY``).
RESERVED_FIELDS = (MODE_KEY, MARKER_KEY, DIM_KEY, LOG_FIELD, CHUNKS_FIELD)
#: Fields only the library's own records carry (the marker; the index log's heads and segments), of any tenant.
LIBRARY_FIELDS = (MARKER_KEY, LOG_FIELD)
#: Set on a filter :func:`without_library_records` made, so a filter handed on twice is wrapped once.
_GUARDED = "_textcrafter_guarded"


def is_library_record(fields: Mapping[str, Any] | None) -> bool:
    """Whether a record's plain fields make it one of the library's own, not a user's.

    The marker and the index log live in the user's store beside the data (under keyed ids and vectors), and hold
    no user field: a user's filter that reads one raises ``KeyError``, and a result that holds one opens nothing.
    """
    return isinstance(fields, Mapping) and any(name in fields for name in LIBRARY_FIELDS)


def without_library_records(user_filter: Callable[..., Any]) -> Callable[..., Any]:
    """A store's callable filter that refuses the library's own records before ``user_filter`` sees one.

    Stores call such a filter with a record (LangChain ``InMemoryVectorStore``: a ``Document``) or with its
    metadata (``FAISS``: a dict); either way the user's filter only ever reads the user's records.
    """
    if getattr(user_filter, _GUARDED, False):
        return user_filter

    def guarded(record: Any, *args: Any, **kwargs: Any) -> Any:
        fields = record if isinstance(record, Mapping) else getattr(record, "metadata", None)
        if is_library_record(fields):
            return False
        return user_filter(record, *args, **kwargs)

    setattr(guarded, _GUARDED, True)
    return guarded


def guarded_filters(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A store call's keyword arguments, each callable filter (``filter=``...) made :func:`without_library_records`."""
    return {
        name: without_library_records(value) if is_filter_kwarg(name) and callable(value) else value
        for name, value in kwargs.items()
    }
