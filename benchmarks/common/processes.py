"""Helper processes the benchmarks start and stop (a ``chroma run`` server, the delay proxy): a free loopback
port, and a process held running until its block ends, started only once it answers."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["free_port", "running"]


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(
    command: Sequence[str], *, ready: Callable[[], bool], name: str, timeout: float = 60.0, **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """``command`` started, yielded once ``ready()`` says so, terminated (killed if it lingers) when the block ends.

    Raises:
        RuntimeError: The process exited first, or was not ready within ``timeout`` seconds.
    """
    proc = subprocess.Popen(list(command), **popen)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} was not ready within {timeout:.0f} s")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
