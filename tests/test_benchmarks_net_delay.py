"""The benchmarks' delay proxy (``benchmarks.common.net_delay``): bytes pass unchanged and in order, each way held
back by the delay asked for (a lower bound the proxy guarantees by construction, not a speed target)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.common.net_delay import delayed


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1 << 16):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the proxy closed the connection"
        out += chunk
    return out


def test_bytes_come_back_unchanged_in_order_and_held_back_each_way(echo_port: int) -> None:
    messages = [f"message {i};".encode() * (1 + i * 300) for i in range(20)]  # small and large pieces
    with delayed(echo_port, 100.0) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        t0 = time.monotonic()
        sock.sendall(b"ping")
        assert _read(sock, 4) == b"ping"
        assert time.monotonic() - t0 >= 0.2 - 1e-3  # 100 ms to the server, 100 ms back
        for m in messages:
            sock.sendall(m)
        assert _read(sock, sum(map(len, messages))) == b"".join(messages)


def test_a_delay_that_is_not_positive_is_refused(echo_port: int) -> None:
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="delay_ms"), delayed(echo_port, bad):
            pass
