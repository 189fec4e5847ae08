"""Sealed search's store-held index: the index lives, sealed, in the user's own store.

* :mod:`.port`: what the core asks of a store (:class:`RecordPort`), implemented by each adapter;
* :mod:`.log`: the write protocol (writer logs, heads found by search, rollback and tamper detection);
* :mod:`.vector_index`: the in-memory FAISS cache of the log;
* :mod:`.store_index`: the mode (:class:`StoreIndexSearch` options, :class:`StoreIndex`).
"""

from .log import IndexLogError, IndexRollbackError, IndexTamperedError
from .port import PortRecord, RecordPort
from .store_index import StoreIndex, StoreIndexSearch

__all__ = [
    "IndexLogError",
    "IndexRollbackError",
    "IndexTamperedError",
    "PortRecord",
    "RecordPort",
    "StoreIndex",
    "StoreIndexSearch",
]
