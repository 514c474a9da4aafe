"""testkit.ports: a free port below the ephemeral range, where no connection takes it."""

from __future__ import annotations

import itertools
import socket

import pytest

from testkit import ports


def test_a_port_below_the_ephemeral_range_nothing_listens_on() -> None:
    start = ports._ephemeral_start()
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST <= port < start
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_not_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        others = (port for port in range(ports.LOWEST, 65_000) if port != taken)
        draws = iter([taken, taken, *itertools.islice(others, ports.TRIES)])
        monkeypatch.setattr(ports, "_ephemeral_start", lambda: 65_000)
        monkeypatch.setattr(ports.random, "randint", lambda low, high: next(draws))
        assert ports.free_port() != taken


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_start", lambda: ports.LOWEST + 10)
    port = ports.free_port()
    assert port >= ports.LOWEST + 10
