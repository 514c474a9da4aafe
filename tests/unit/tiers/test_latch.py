"""A delivery's flags (tiers.deliveries.Latch) and its start ids' prefix after a fork."""

from __future__ import annotations

import os
import threading

from tiers.deliveries import Latch
from tiers.middleware import deliveries


def test_a_latch_is_set_once_and_wakes_every_waiter() -> None:
    # Given a latch and three threads waiting for it
    latch = Latch()
    assert not latch.is_set() and latch.wait(0.01) is False
    woken: list[bool] = []
    waiters = [threading.Thread(target=lambda: woken.append(latch.wait(10))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    # When it is set, twice
    latch.set()
    latch.set()
    for waiter in waiters:
        waiter.join(10)
    # Then every waiter woke with True, and it stays set
    assert woken == [True, True, True]
    assert latch.is_set() and latch.wait(0) is True and latch.wait() is True


def test_a_forked_child_draws_its_own_start_prefix() -> None:
    # Given this process's start ids' prefix
    parent = deliveries._start_prefix
    read, write = os.pipe()
    # When a child is forked
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, deliveries._start_prefix.encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    # Then its start ids cannot repeat the parent's
    assert child and parent and child != parent
