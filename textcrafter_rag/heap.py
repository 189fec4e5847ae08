"""Handing the C heap's free pages back to the operating system after a bulk load.

glibc's ``free`` returns memory to the system only from the top of the heap, or for blocks above its mmap
threshold, and that threshold rises as large blocks are freed. Building an index of a million records leaves
hundreds of megabytes of freed, still resident pages among the blocks the index keeps (decoded log segments,
the exact shards that moved into the trained index, a snapshot's sealed text): opening a snapshot of a million
records grew the process by 212 B a record where the index holds 76
(``benchmarks/results/store_index_memory_before.md``).

:func:`release_free_heap` asks glibc for ``malloc_trim(0)``, which gives back every whole free page of every
arena. It changes no setting of the allocator or the process: memory still allocated is untouched, and later
allocations behave as before. The store-held index calls it after the bulk steps that make such garbage (a
snapshot loaded, every 20,000 entries applied, a codebook swapped in, a compaction stored): mostly a few
milliseconds at a million records, at most about a tenth of a second in a hand check, so a search that happens
to apply the 20,000th entry pays it once.
Elsewhere (musl, macOS, Windows) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any

__all__ = ["release_free_heap"]


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Give the C heap's whole free pages back to the system; whether the C library could (glibc only)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
