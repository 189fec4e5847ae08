"""An add and a delete of one id from two processes that overlap: the index ends holding what the store holds.

Two "processes" (two cores over one dict store) write in the adapters' order (add: index entry, then the record,
then the check; delete: the record, then the tombstone, then the check), and each test forces the one
interleaving it is about, never by timing. Each also runs the interleaving without the check it tests, to show
that the record is then stored and found by no search.
"""

from __future__ import annotations

import warnings

import numpy as np

from textcrafter_rag.sealed import PortRecord, StoreIndexSearch
from textcrafter_rag.sealed.core import SealedSearch, UnindexedRecordsWarning
from textcrafter_rag.sealed.records import ID_FIELD
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

KEY = SecretKey(bytes(range(32)))
X = np.eye(8, dtype=np.float32)[:1]


class Process:
    """One process's sealed store over the port, in the adapters' order of writes."""

    def __init__(self, port: MemoryPort) -> None:
        self.port = port
        self.core = SealedSearch(KEY, tenant="t", options=StoreIndexSearch(compact_every=0))
        self.core.attach(port)

    def log(self, ids: list[str]) -> None:
        """An add's first step: the index entries."""
        self.core.index_add(ids, X)

    def store(self, ids: list[str]) -> None:
        """An add's second step: the sealed records."""
        texts = [f"sealed:{i}" for i in ids]
        fields = self.core.record_fields(X, ids, texts)
        keyed = self.core.store_vectors(X, ids)
        self.port.put(
            [PortRecord(i, t, {**f, ID_FIELD: i}, v.tolist()) for i, t, f, v in zip(ids, texts, fields, keyed)]
        )

    def confirm(self, ids: list[str]) -> None:
        """An add's last step: the log read again (a delete that raced the add)."""
        self.core.index_stored(ids, X)

    def tombstone(self, ids: list[str], *, check: bool = True) -> None:
        """A delete's last steps: the tombstones, then (``check``) the records read back."""
        held = self.core.store_index(X.shape[1])  # the dimension, as the adapters read it from the marker
        assert held is not None
        if check:
            self.core.index_remove(ids)
        else:
            held.remove(ids)

    def finds(self) -> list[str]:
        """What a new process's search finds (the store holds only "x" and the log; the marker an adapter would
        have written is taken as read, so an index that lost "x" answers empty instead of raising)."""
        reader = Process(self.port)
        reader.core.marker_seen = True
        with warnings.catch_warnings():  # the lost "x" of the unchecked runs is warned about: expected there
            warnings.simplefilter("ignore", UnindexedRecordsWarning)
            return reader.core.index_candidates(X[0])


def test_an_add_whose_entry_a_racing_delete_removed_logs_it_again() -> None:
    """A logs "x"; B deletes "x" from the store (nothing there yet) and logs its tombstone after A's entry; A then
    stores the record. Without A's check the store holds "x" and the index does not."""
    for checked in (False, True):
        port = MemoryPort()
        a, b = Process(port), Process(port)
        a.log(["x"])
        port.delete(["x"])  # B's delete reaches the store first
        b.tombstone(["x"])  # then its tombstone, after reading A's entry: merged after it
        a.store(["x"])
        if checked:
            a.confirm(["x"])
        assert [r.id for r in port.get(["x"])] == ["x"]  # the store holds the record either way
        assert a.finds() == (["x"] if checked else [])


def test_a_delete_whose_record_a_racing_add_stored_again_logs_it_again() -> None:
    """ "x" is stored; B deletes it from the store; A re-adds it in full (entry, record, check: no tombstone yet);
    B then logs its tombstone after A's entry. Without B's read-back the store holds "x" and the index does not."""
    for checked in (False, True):
        port = MemoryPort()
        a, b = Process(port), Process(port)
        a.log(["x"])
        a.store(["x"])
        port.delete(["x"])  # B's delete reaches the store
        a.log(["x"])  # A's re-add, all of it, before B's tombstone
        a.store(["x"])
        a.confirm(["x"])
        b.tombstone(["x"], check=checked)
        assert [r.id for r in port.get(["x"])] == ["x"]
        assert a.finds() == (["x"] if checked else [])


def test_an_add_and_a_delete_that_do_not_overlap_keep_their_order() -> None:
    """A delete made after an add was acknowledged removes it everywhere, the checks notwithstanding."""
    port = MemoryPort()
    a, b = Process(port), Process(port)
    a.log(["x"])
    a.store(["x"])
    a.confirm(["x"])
    port.delete(["x"])
    b.tombstone(["x"])
    assert port.get(["x"]) == [] and a.finds() == []
