"""Provider windows shared by real worker processes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows


@pytest.fixture
def broker(redis_url: str, namespace: str) -> Iterator[TierBroker]:
    broker = h.make_broker(redis_url, namespace)
    yield broker
    broker.close()


@pytest.fixture
def router(broker: TierBroker) -> Router:
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    return Router(registry, broker)


def test_window_counter_admits_its_limit_then_answers_the_window_end(
    redis_client: redis.Redis, namespace: str
) -> None:
    windows = RateWindows(redis_client, namespace)
    rule = WindowRule(3, 10.0)
    now = 1_000_005.0
    answers = [windows.acquire(windows.key("f", "notion", "1"), rule, now=now) for _ in range(5)]
    assert answers[:3] == [None, None, None]
    assert answers[3] == answers[4] == 1_000_010.0
    # the refused starts were taken back: the next window admits its full limit again
    later = [windows.acquire(windows.key("f", "notion", "1"), rule, now=now + 10) for _ in range(3)]
    assert later == [None, None, None]


def test_window_shared_by_two_worker_processes_admits_exactly_its_limit(
    router: Router, broker: TierBroker, redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    # Given 23 jobs of one organization data source under a 5-per-second window
    router.enqueue_many(
        [JobRequest("t_window", 4, {"item": str(i), "provider": "notion"}) for i in range(23)]
    )
    # When two worker processes drain them
    workers = [h.start_worker_process(redis_url, namespace, threads=4) for _ in range(2)]
    try:
        h.wait_until(
            lambda: sum(1 for e in h.trace(redis_client, namespace) if e["ev"] == "end") == 23,
            timeout=60,
        )
    finally:
        for worker in workers:
            worker.terminate()
            worker.join(10)
    starts = [e["t"] for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    per_window = Counter(math.floor(t) for t in starts)
    # Then no one-second window saw more than 5 starts, full windows saw exactly 5,
    # and nothing failed: the refused starts were delayed, not retried
    assert max(per_window.values()) == 5
    assert sorted(per_window.values(), reverse=True)[:4] == [5, 5, 5, 5]
    assert len(starts) == 23
    for i in range(23):
        assert broker.jobs.record(f"window-{i}")["failures"] == "0"  # type: ignore[index]
