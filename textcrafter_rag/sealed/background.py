"""The background compaction's thread yields the CPU to the writes beside it, once it holds no lock they take.

A compaction copies the index under the lock that writes take, then serializes, seals and stores the copy in a
thread of its own (:mod:`.compaction`). On a machine with as many busy threads as cores, that thread took CPU
from the writes themselves: FAISS adds a batch on every core at once (OpenMP), so one core busy with the
compaction slowed the whole add. At ten million records on two cores a write during a compaction took 1.1 s, where it
took 0.2 s alone (``benchmarks/results/store_index_stall_10m_copy.md``).

:func:`lower_this_thread` raises the calling thread's nice value by :data:`NICE_STEP` (Linux keeps a nice value
for each thread): the scheduler then gives the writes' threads the cores they want, and the compaction the
rest. It changes only the thread that calls it, which the index started for this one compaction and which
ends with it; nothing of the caller's process, threads or settings. Elsewhere (macOS, Windows, where a nice
value is the whole process's) it does nothing.

It is called after the copy, never before: a thread of low priority that holds the lock would keep the writes
waiting on it (a priority inversion). The one step that takes the lock again is a single empty segment.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["NICE_STEP", "lower_this_thread"]

#: Nice values the compaction's thread is lowered by: at 10 the scheduler gives it about a tenth of what a
#: thread at the caller's value gets, when both want the same core.
NICE_STEP = 10


def lower_this_thread() -> bool:
    """Lower the calling thread's CPU priority by :data:`NICE_STEP` (at most to 19); whether it could (Linux only)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "setpriority"):
        return False
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + NICE_STEP))
    except OSError:  # a sandbox that refuses it: the compaction runs as it did
        return False
    return True
