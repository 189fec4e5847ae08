"""The record layout of sealed search: every plain ``_tc_*`` field the core writes, defined once.

Both adapters reserve these names (a user's metadata may not use them) and read them back by these constants.
"""

from __future__ import annotations

__all__ = ["CHUNKS_FIELD", "DIM_KEY", "INDEX_MODES", "LOG_FIELD", "MARKER_KEY", "MODE_KEY", "RESERVED_FIELDS"]

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
#: Fields the sealed stores add to records (besides the sealed vector, ``two_stage.VECTOR_KEY``).
RESERVED_FIELDS = (MODE_KEY, MARKER_KEY, DIM_KEY, LOG_FIELD, CHUNKS_FIELD)
