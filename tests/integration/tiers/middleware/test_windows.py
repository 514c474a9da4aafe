"""Provider windows shared by real worker processes."""

from __future__ import annotations

from collections import Counter

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows


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
    starts = [e for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    # counted by the window that admitted each run (a wall-clock second could straddle)
    per_window = Counter(e["window"] for e in starts)
    assert None not in per_window
    # Then no one-second window saw more than 5 starts, full windows saw exactly 5 but for
    # the reservations that lapsed (a delayed job that woke after its reserved window, as a
    # loaded machine can make it: capacity lost and counted, never a start over the limit),
    # and nothing failed: the refused starts were delayed, not retried
    assert max(per_window.values()) == 5
    windows = RateWindows(redis_client, namespace)
    lapsed = windows.lapsed(windows.key("t_window", "notion", "ods-4"))
    shortfall = sum(5 - count for count in sorted(per_window.values(), reverse=True)[:4])
    assert shortfall <= lapsed
    assert len(starts) == 23
    for i in range(23):
        assert broker.jobs.record(f"window-{i}")["failures"] == "0"  # type: ignore[index]


def test_a_full_window_reserves_a_start_in_the_first_window_with_room(
    redis_client: redis.Redis, namespace: str
) -> None:
    windows = RateWindows(redis_client, namespace)
    rule = WindowRule(2, 10.0)
    key = windows.key("f", "notion", "1")
    now = 1_000_005.0
    # Given a full current window
    assert windows.reserve(key, rule, now=now).admitted
    assert windows.reserve(key, rule, now=now).admitted
    # Then the next four starts are reserved two per future window, in order
    later = [windows.reserve(key, rule, now=now) for _ in range(4)]
    assert [a.admitted for a in later] == [False] * 4
    assert [a.reserved_index for a in later] == [100_001, 100_001, 100_002, 100_002]
    assert [a.start_at for a in later] == [1_000_010.0, 1_000_010.0, 1_000_020.0, 1_000_020.0]
    # When a reserved start arrives in its window, it is admitted without counting again
    assert windows.reserve(key, rule, reserved_index=100_001, now=1_000_011.0).admitted
    # and a fresh start in that window finds it full (both of its starts are reserved)
    fresh = windows.reserve(key, rule, now=1_000_011.0)
    assert not fresh.admitted and fresh.reserved_index == 100_003
    assert windows.lapsed(key) == 0
    # A reservation whose window has passed counts as lapsed and the start is counted anew
    stale = windows.reserve(key, rule, reserved_index=100_001, now=1_000_031.0)
    assert stale.admitted
    assert windows.lapsed(key) == 1
    assert int(redis_client.get(f"{key}:{100_003}") or 0) == 2


def test_throttled_jobs_are_delayed_once_each_to_their_reserved_window(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given 15 jobs under a 5-per-second window
    router.enqueue_many(
        [JobRequest("t_window", 9, {"item": f"r{i}", "provider": "notion"}) for i in range(15)]
    )
    with h.running_worker(broker, threads=4):
        h.wait_until(
            lambda: all(h.state(broker, f"window-r{i}") == "completed" for i in range(15)),
            timeout=30,
        )
    starts = [e for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    # Then each ran once, at most 5 per window, and none was delivered more than twice
    # (refused once with a reservation, then run): no thundering herd at each window's end
    assert len(starts) == 15
    assert max(Counter(e["window"] for e in starts).values()) <= 5
    deliveries = [int(broker.jobs.record(f"window-r{i}")["attempts"]) for i in range(15)]  # type: ignore[index]
    assert max(deliveries) <= 2, deliveries
    assert deliveries.count(1) >= 5
