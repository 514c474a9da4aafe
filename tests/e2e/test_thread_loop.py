"""gunicorn serving through :class:`services.app.api.thread_loop.LeanThreadWorker`: the
gthread worker's behaviour (keep-alive, its limit and timeout, the connection cap, the
arbiter's heartbeat, the graceful end) with the loop's own bookkeeping."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
GET = "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"


def ask(sock: socket.socket, path: str) -> bytes:
    """One request on an open keep-alive connection; the answer's body."""
    sock.sendall(GET.format(path=path).encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(
        next(
            line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        ).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[int, subprocess.Popen[bytes]]]]:
    servers: list[subprocess.Popen[bytes]] = []

    def start(*options: str) -> tuple[int, subprocess.Popen[bytes]]:
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--worker-class",
                "services.app.api.thread_loop.LeanThreadWorker",
                "--workers",
                "1",
                "--bind",
                f"127.0.0.1:{port}",
                *options,
                "tests.e2e.thread_loop_app:app",
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        servers.append(process)

        def up() -> bool:
            try:
                with connect(port) as sock:
                    return ask(sock, "/fast") == b"ok"
            except OSError:
                return False

        wait_for(up)
        return port, process

    yield start
    for process in servers:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_many_keepalive_connections_each_served_in_turn(serve) -> None:
    port, _ = serve("--threads", "2")
    sockets = [connect(port) for _ in range(24)]
    try:
        with ThreadPoolExecutor(len(sockets)) as pool:
            answers = list(pool.map(lambda sock: [ask(sock, "/fast") for _ in range(20)], sockets))
        assert answers == [[b"ok"] * 20] * len(sockets)
    finally:
        for sock in sockets:
            sock.close()


def test_an_idle_keepalive_connection_is_closed_after_the_keepalive_period(serve) -> None:
    port, _ = serve("--threads", "2", "--keep-alive", "1")
    with connect(port) as idle, connect(port) as busy:
        assert ask(idle, "/fast") == b"ok"
        opened = time.monotonic()
        # The other connection keeps the loop turning meanwhile.
        while time.monotonic() - opened < 2.5:
            assert ask(busy, "/fast") == b"ok"
            time.sleep(0.1)
        idle.settimeout(5)
        assert idle.recv(1) == b""  # the server closed it
        assert ask(busy, "/fast") == b"ok"  # a connection in use is kept


def test_past_the_connection_cap_a_connection_waits_for_a_keepalive_one_to_close(serve) -> None:
    port, _ = serve("--threads", "1", "--worker-connections", "2", "--keep-alive", "1")
    first, second = connect(port), connect(port)
    try:
        assert ask(first, "/fast") == b"ok"
        assert ask(second, "/fast") == b"ok"
        with connect(port) as third:  # accepted once a kept one times out and is closed
            assert ask(third, "/fast") == b"ok"
        assert first.recv(1) == b"" or second.recv(1) == b""
    finally:
        first.close()
        second.close()


def test_an_idle_worker_keeps_telling_the_arbiter_it_is_alive(serve) -> None:
    # The arbiter kills a worker silent for --timeout seconds: the same worker must answer.
    port, _ = serve("--threads", "1", "--timeout", "2")
    with connect(port) as sock:
        pid = ask(sock, "/pid")
    time.sleep(6)
    with connect(port) as sock:
        assert ask(sock, "/pid") == pid


def test_a_request_in_flight_finishes_when_the_worker_is_stopped(serve) -> None:
    port, process = serve("--threads", "2", "--graceful-timeout", "10")
    with connect(port) as sock, ThreadPoolExecutor(1) as pool:
        slow = pool.submit(ask, sock, "/slow?s=1.5")
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        assert slow.result(timeout=15) == b"ok"
    assert process.wait(timeout=15) == 0
