"""The room each inverted list of the store-held index keeps for new codes, and the one copy that gives it.

FAISS adds a code to a list by growing the list's arrays, doubling their capacity whenever one is full, so a list
built by adds holds up to twice its codes. :class:`~.vector_index.VectorIndex` instead allocates each list once
when a codebook is swapped in, for the entries it is about to hold (:func:`reserve`), and then copies a full list
into one allocation of its new size plus :data:`ROOM` (:func:`make_room`, :func:`with_room`): a list then holds a
sixty-fourth more than its codes on average. A list's copy is its own (a few KB to a few hundred KB), never the
whole index's, so less room costs little.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ROOM", "copy_list", "list_sizes", "make_room", "reserve", "with_room"]

#: Room a list is given for new codes, as a share of its size.
ROOM = 1 / 32


def with_room(size: int) -> int:
    """The capacity a list of ``size`` entries is given: its size and :data:`ROOM` of it more."""
    return size + math.ceil(size * ROOM)


def list_sizes(invlists: Any) -> np.ndarray:
    """Each inverted list's size."""
    return np.fromiter((invlists.list_size(at) for at in range(invlists.nlist)), np.int64, invlists.nlist)


def copy_list(faiss: Any, source: Any, target: Any, at: int, size: int, room: int) -> None:
    """Write list ``at``'s ``size`` entries of ``source`` as ``target``'s list ``at``, in one allocation of ``room``
    entries (``target`` may be ``source``: a list emptied then grown to ``room`` at once is allocated at exactly
    that size, where it held less)."""
    code_size = source.code_size
    ids = np.zeros(room, dtype=np.int64)
    codes = np.zeros(room * code_size, dtype=np.uint8)
    if size:
        ids[:size] = faiss.rev_swig_ptr(source.get_ids(at), size)
        codes[: size * code_size] = faiss.rev_swig_ptr(source.get_codes(at), size * code_size)
    target.resize(at, 0)
    target.add_entries(at, room, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
    target.resize(at, size)  # the arrays keep their capacity


def reserve(faiss: Any, invlists: Any, counts: np.ndarray) -> np.ndarray:
    """Give each empty list room for its ``counts`` entries and :data:`ROOM` of them more (:func:`with_room`), in
    one allocation; the capacities given."""
    capacity = np.array([with_room(int(c)) for c in counts.tolist()], dtype=np.int64)
    for at in np.flatnonzero(capacity).tolist():
        copy_list(faiss, invlists, invlists, at, 0, int(capacity[at]))
    return capacity


def make_room(faiss: Any, invlists: Any, assign: np.ndarray, capacity: np.ndarray, used: np.ndarray) -> None:
    """Before entries are filed by ``assign`` (each one's list), give each list that they would overflow room
    for them and :data:`ROOM` of its new size more: one copy of its own entries into an allocation of that size
    (FAISS would double it); the other lists are not touched. ``capacity`` and ``used`` (each list's, updated
    here) bound its allocation from below and its size from above (a removal is not subtracted), so a list with
    room to spare after removals may be copied early, never late."""
    counts = np.bincount(assign, minlength=len(capacity))
    for at in np.flatnonzero(used + counts > capacity).tolist():
        size = invlists.list_size(at)
        need = size + int(counts[at])
        if need > capacity[at]:
            room = with_room(need)
            copy_list(faiss, invlists, invlists, at, size, room)
            capacity[at] = room
        used[at] = size
    used += counts
