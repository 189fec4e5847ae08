"""Handing the C heap's free pages back: on glibc the freed middle of the heap really leaves the RSS."""

from __future__ import annotations

import platform

import psutil
import pytest

from textcrafter_rag.heap import release_free_heap

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_blocks_in_the_middle_of_the_heap_leave_the_rss_only_when_released() -> None:
    # 256 MiB in 4 KiB blocks (under every mmap threshold: they come from the heap), with a small block kept after
    # every 64 of them, so the freed runs sit below live blocks, where free() never gives pages back by itself
    big, kept = [], []
    for _ in range(1_024):
        big.extend(bytearray(4_096) for _ in range(64))
        kept.append(bytearray(600))
    del big
    before = psutil.Process().memory_info().rss
    assert release_free_heap() is True
    after = psutil.Process().memory_info().rss
    assert before - after > 128 * 2**20, (before, after)
    assert len(kept) == 1_024


def test_elsewhere_it_says_it_could_not() -> None:
    assert release_free_heap() is GLIBC
