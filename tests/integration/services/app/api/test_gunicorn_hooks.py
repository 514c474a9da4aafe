"""The API's gunicorn hooks on real sockets and a real process: the arbiter hands its
listening socket over and each worker listens on one of its own, with ``SO_REUSEPORT``
(``services.app.api.worker_listeners``); a worker freezes what start-up made
(``tiers.gc_tuning``)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn import sock
from gunicorn.config import Config
from gunicorn.glogging import Logger

from services.app.api.worker_listeners import WorkerListeners
from tiers.gc_tuning import YOUNG_THRESHOLD


def _config(bind: str) -> Config:
    config = Config()
    config.set("bind", bind)
    return config


@pytest.fixture
def arbiter() -> Any:
    """What the hooks read of gunicorn's arbiter: its config and its bound listeners."""
    config = _config("127.0.0.1:0")
    listeners = sock.create_sockets(config, Logger(config))
    yield SimpleNamespace(cfg=config, LISTENERS=listeners)
    for listener in listeners:
        listener.close()  # nothing when the hook closed it


def _worker(config: Config, sockets: list[Any] | None = None) -> Any:
    return SimpleNamespace(cfg=config, sockets=sockets if sockets is not None else [])


def _option(listener: socket.socket, level: int, name: int) -> int:
    return listener.getsockopt(level, name)


def test_each_worker_listens_on_its_own_socket_at_the_arbiters_address(arbiter: Any) -> None:
    # Given the arbiter bound port 0 (the kernel chose one)
    port = arbiter.LISTENERS[0].getsockname()[1]
    hooks = WorkerListeners()

    # When it is ready: its socket is closed, the address it got noted
    hooks.release(arbiter)
    assert arbiter.LISTENERS == []

    # And two workers start
    first, second = _worker(arbiter.cfg), _worker(arbiter.cfg)
    hooks.open_own(arbiter, first)
    hooks.open_own(arbiter, second)
    try:
        # Then each listens on a socket of its own on that port, shared through SO_REUSEPORT,
        # with TCP_NODELAY for the connections it accepts
        (one,), (other,) = first.sockets, second.sockets
        assert one.fileno() != other.fileno()
        for listener in (one, other):
            assert listener.getsockname() == ("127.0.0.1", port)
            assert _option(listener, socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            assert _option(listener, socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            assert _option(listener, socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert listener.getblocking() is False

        # And the kernel deals connections to both (32 connections all on one socket: 2^-31)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(32)]
        try:
            accepted = _accept(32, [one, other])
        finally:
            for client in clients:
                client.close()
        assert sum(accepted) == 32 and min(accepted) > 0
    finally:
        for listener in first.sockets + second.sockets:
            listener.close()


def _accept(expected: int, listeners: list[socket.socket]) -> list[int]:
    """Accept from each (non-blocking) listener until ``expected`` connections came in (or
    10 s passed): how many each took."""
    counts = [0] * len(listeners)
    deadline = time.monotonic() + 10
    while sum(counts) < expected and time.monotonic() < deadline:
        for index, listener in enumerate(listeners):
            try:
                connection, _ = listener.accept()
            except BlockingIOError:
                continue
            connection.close()
            counts[index] += 1
    return counts


def test_a_worker_that_has_sockets_keeps_them(arbiter: Any) -> None:
    # Given sockets already set on the worker (gunicorn 24 and later open them with
    # reuse_port)
    hooks = WorkerListeners()
    hooks.release(arbiter)
    own = socket.socket()
    try:
        worker = _worker(arbiter.cfg, [own])

        # When the worker starts, the hook leaves them as they are
        hooks.open_own(arbiter, worker)

        assert worker.sockets == [own]
    finally:
        own.close()


def test_a_unix_socket_stays_shared(tmp_path: Path) -> None:
    # Given an arbiter bound to a Unix socket (a path, not a port)
    config = _config(f"unix:{tmp_path / 'api.sock'}")
    listeners = sock.create_sockets(config, Logger(config))
    arbiter = SimpleNamespace(cfg=config, LISTENERS=listeners)
    hooks = WorkerListeners()
    try:
        # When it is ready, it keeps its socket, and a worker inherits it unchanged
        hooks.release(arbiter)
        worker = _worker(config, list(arbiter.LISTENERS))
        hooks.open_own(arbiter, worker)

        assert listeners == arbiter.LISTENERS
        assert worker.sockets == listeners
        assert listeners[0].sock is not None  # still open
    finally:
        sock.close_sockets(listeners, unlink=True)


PROBE = """
import gc, json
from services.app.cli.api import server_options

before = gc.get_threshold()
server_options("127.0.0.1", 8080, 2, "INFO")["post_worker_init"](None)
print(json.dumps({"before": before, "after": gc.get_threshold(),
                  "frozen": gc.get_freeze_count()}))
"""


def test_a_worker_freezes_what_start_up_made_once_its_app_is_built() -> None:
    # When gunicorn calls post_worker_init in a worker process (its app is built then)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)

    # Then start-up's objects are in the permanent generation, which no collection walks,
    # and young collections come every YOUNG_THRESHOLD allocations, as in a job worker
    assert seen["frozen"] > 10_000
    assert seen["after"] == [YOUNG_THRESHOLD, seen["before"][1], seen["before"][2]]
