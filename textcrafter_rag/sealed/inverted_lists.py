"""The room each inverted list of the store-held index keeps for new codes, and the copies that give it.

FAISS adds a code to a list by growing the list's arrays, doubling their capacity whenever one is full, so a list
built by adds holds up to twice its codes. :class:`~.vector_index.VectorIndex` instead packs every list at its size
when a codebook is swapped in (:func:`repack`), as FAISS reads a snapshot's lists, and copies a list each time
it is full into one allocation of its size plus :data:`ROOM` (:func:`with_room`, :func:`copy_list`): a list that
grows then holds a sixty-fourth more than its codes on average. A list's copy is its own (a few KB to a few hundred
KB), never the whole index's, so less room costs little.
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np

__all__ = ["ROOM", "copy_list", "list_sizes", "repack", "with_room"]

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


def repack(faiss: Any, ivf: Any) -> np.ndarray:
    """Replace ``ivf``'s inverted lists by new ones, each allocated once at its size, laid out one after another;
    the lists' sizes.

    Each list's entries are first copied into one scratch mapping of their own (every list's labels, then every
    list's codes), the old lists freed, and the new ones allocated in list order, each straight from the scratch
    with no buffer of its own. So a new list is not placed among the old ones (copied list by list, a new list took
    a free chunk between two old ones, and the old ones, freed after, left holes around it whose partial pages stay
    resident), and nothing freed lies between the new ones. The scratch is an anonymous mapping, never a block of
    the heap the lists are allocated from.
    """
    old = ivf.invlists
    sizes = list_sizes(old)
    code_size, nlist = int(old.code_size), int(old.nlist)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    entries = int(starts[-1])
    scratch = mmap.mmap(-1, max(entries * (8 + code_size), 1))
    ids = np.frombuffer(scratch, dtype=np.int64, count=entries)
    codes = np.frombuffer(scratch, dtype=np.uint8, count=entries * code_size, offset=entries * 8)
    held = np.flatnonzero(sizes).tolist()
    for at in held:
        a, size = int(starts[at]), int(sizes[at])
        ids[a : a + size] = faiss.rev_swig_ptr(old.get_ids(at), size)
        codes[a * code_size : (a + size) * code_size] = faiss.rev_swig_ptr(old.get_codes(at), size * code_size)
    lists = faiss.ArrayInvertedLists(nlist, code_size)
    ivf.replace_invlists(lists, True)  # the index owns the new lists and frees the old ones
    lists.this.disown()
    ptr = faiss.swig_ptr
    for at in held:
        a = int(starts[at])
        lists.add_entries(at, int(sizes[at]), ptr(ids[a:]), ptr(codes[a * code_size :]))  # allocated at its size
    del ids, codes
    scratch.close()
    return sizes
