"""A TCP proxy that delays every byte by a fixed time each way: a server on this machine as if across a network.

The benchmarks run their Chroma server on loopback, where a request's round trip costs nothing but the two
processes' CPU, so a search that makes two requests one after the other and a search that makes them at once
time alike. A client a network away pays each round trip. Kernel delay (``tc netem``) needs a module and root
that a sandbox or CI runner may not give, so this proxy, run as its own process (its work never takes the
client's GIL), forwards each connection both ways and holds each piece it reads for ``delay_ms`` before writing
it on: a fixed one-way latency, in order, with no bandwidth limit.

Run by :func:`delayed` (``--net-delay-ms`` of ``benchmarks.sealed_search.store_index``).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common.processes import free_port, running

__all__ = ["delayed"]


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Forward what ``reader`` reads to ``writer``, each piece ``delay`` seconds after it was read, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            await asyncio.sleep(max(0.0, due - loop.time()))
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((loop.time() + delay, b""))
    await sender


async def _serve(port: int, target_port: int, delay: float) -> None:
    async def connection(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        for w in (client_writer, server_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _pump(client_reader, server_writer, delay),
            _pump(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


@contextmanager
def delayed(target_port: int, delay_ms: float) -> Iterator[int]:
    """A proxy process on a loopback port that forwards to ``target_port`` with ``delay_ms`` each way; its port.

    Raises:
        ValueError: ``delay_ms`` is not positive.
        RuntimeError: The proxy exited, or did not listen within 30 s.
    """
    if not delay_ms > 0:
        raise ValueError(f"delay_ms must be positive, got {delay_ms}")
    port = free_port()

    def ready() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    args = ["--port", str(port), "--target-port", str(target_port), "--delay-ms", str(delay_ms)]
    code = "import sys; from benchmarks.common.net_delay import main; main(sys.argv[1:])"
    root = Path(__file__).resolve().parents[2]
    with running([sys.executable, "-c", code, *args], ready=ready, name="the delay proxy", timeout=30, cwd=root):
        yield port


def main(argv: list[str] | None = None) -> None:
    """The proxy process: ``--port``, ``--target-port``, ``--delay-ms``; serves until terminated."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the loopback port to listen on")
    parser.add_argument("--target-port", type=int, required=True, help="the loopback port to forward to")
    parser.add_argument("--delay-ms", type=float, required=True, help="milliseconds added each way")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.target_port, args.delay_ms / 1000))
