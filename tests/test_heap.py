"""Handing the C heap's free pages back: on glibc the freed middle of the heap really leaves the RSS."""

from __future__ import annotations

import platform
import threading

import psutil
import pytest

from textcrafter_rag.heap import in_own_thread, release_free_heap

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


def test_a_call_in_its_own_thread_gives_back_what_it_returns_and_raises_what_it_raises() -> None:
    caller = threading.current_thread()
    seen: list[threading.Thread] = []

    def work(a: int, b: int) -> int:
        seen.append(threading.current_thread())
        return a + b

    assert in_own_thread(work, 2, 3) == 5
    assert seen and seen[0] is not caller and not seen[0].is_alive()  # another thread, joined before it returned

    def fail() -> None:
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        in_own_thread(fail)
