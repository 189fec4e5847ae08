"""The room each inverted list of the store-held index keeps for new codes, and the one copy that gives it.

FAISS adds a code to a list by growing the list's arrays, doubling their capacity whenever one is full, so a list
built by adds holds up to twice its codes. :class:`~.vector_index.VectorIndex` instead copies each list into one
allocation: of its size when a codebook is swapped in, and of its size plus :data:`ROOM` (:func:`with_room`) each
time it is full, so a list written to holds a sixty-fourth more than its codes on average. A list's copy is its
own (a few KB to a few hundred KB), never the whole index's, so less room costs little.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ROOM", "copy_list", "list_sizes", "with_room"]

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
