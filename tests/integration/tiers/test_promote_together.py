"""Delayed messages due at the same moment (the starts a full window reserved in a later one,
all due at its opening) are moved back to their queue together, in one round trip
(``JobStore.promote``), and each runs once without spending an attempt."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.options import JOB_ID
from tiers.policies import WindowRule

#: 3 starts per 2 s window: 9 jobs take this window and reserve 3 starts in each of the next two.
RULE = WindowRule(3, 2.0)
JOBS = 9


def test_the_starts_a_window_reserved_are_moved_to_their_queue_together(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace, windows={"t_window.*": RULE})
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    moves: list[list[str]] = []
    promote = broker.jobs.promote

    def counted(delayed: Sequence[tuple[Any, str]], worker_id: str) -> list[Any]:
        moves.append([message.options[JOB_ID] for message, _queue in delayed])
        return promote(delayed, worker_id)

    broker.jobs.promote = counted  # type: ignore[method-assign]
    # Given a window just opened (its reservations are made well before the next opens)
    time.sleep(-time.time() % RULE.period_seconds + 0.05)
    # When 9 jobs of one data source meet it on a worker
    with h.running_worker(broker, threads=4):
        router.enqueue_many(
            [JobRequest("t_window", 4, {"item": str(i), "provider": "notion"}) for i in range(JOBS)]
        )
        h.wait_until(
            lambda: all(h.state(broker, f"window-{i}") == "completed" for i in range(JOBS)),
            timeout=30,
        )
    broker.close()
    # Then the 6 jobs it delayed were moved back in two moves, the 3 due at each opening in one
    assert sorted(len(move) for move in moves) == [3, 3]
    # And each job ran once, no attempt spent
    starts = [e for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    assert sorted(e["item"] for e in starts) == sorted(str(i) for i in range(JOBS))
    for i in range(JOBS):
        assert broker.jobs.record(f"window-{i}")["failures"] == "0"  # type: ignore[index]
