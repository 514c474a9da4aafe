"""``speedtier api`` with two workers: each worker listens on a socket of its own and the
arbiter on none, so keep-alive connections opened together are spread over both workers
instead of all landing on the first one awake (``services.app.api.worker_listeners``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable

import pytest

from tests.e2e.test_gunicorn_refusals import REPO, free_port, serving
from tests.fixtures_platform import TOKEN

_LISTEN, _ESTABLISHED = "0A", "01"


def _inodes(port: int, state: str) -> set[str]:
    """Socket inodes of TCP sockets in ``state`` whose local port is ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for fields in (line.split() for line in lines):
                if fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(fields[9])
    return found


def _socket_inodes(pid: int) -> set[str]:
    held = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[8:-1])
    return held


def _children(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == pid:
            children.append(int(entry))
    return children


def _held(pids: Iterable[int], inodes: set[str]) -> dict[int, int]:
    return {pid: len(_socket_inodes(pid) & inodes) for pid in pids}


@pytest.mark.slow
def test_each_worker_listens_on_its_own_socket_and_gets_connections(
    redis_url: str, database_url: str, namespace: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "INTERNAL_API_TOKEN": TOKEN,
    }
    command = [
        sys.executable, "-m", "services.app.cli", "api",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--threads", "2",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    clients: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 30
        while not (serving(port) and len(_children(process.pid)) == 2):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "gunicorn did not start two workers"
            time.sleep(0.1)
        workers = _children(process.pid)
        # Both workers have booted once each listens (the probe above may have reached one)
        while sum(_held(workers, _inodes(port, _LISTEN)).values()) < 2:
            assert time.monotonic() < deadline, "the workers did not both listen"
            time.sleep(0.1)

        # Then each worker holds a listening socket of its own and the arbiter none
        listening = _inodes(port, _LISTEN)
        assert len(listening) == 2
        assert _held(workers, listening) == {pid: 1 for pid in workers}
        assert not _socket_inodes(process.pid) & listening

        # And 32 connections opened together are spread over both (all on one: 2^-31)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(32)]
        while sum(_held(workers, _inodes(port, _ESTABLISHED)).values()) < 32:
            assert time.monotonic() < deadline + 30, "the workers did not accept"
            time.sleep(0.1)
        spread = _held(workers, _inodes(port, _ESTABLISHED))
        assert min(spread.values()) > 0, spread
    finally:
        for client in clients:
            client.close()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=40)
