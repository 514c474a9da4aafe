"""Run rates are counted by the settle script: every ended run adds to its queue's, its
group's and its window's counts of the minute, in the same step as its outcome."""

from __future__ import annotations

import time

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.run_rates import KEEP_SECONDS, minute_of, rates_key, recent_counts


def test_every_ended_run_is_counted_by_its_queue_group_and_window(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a plain job, two grouped jobs of organization 7 and a windowed job
    started = time.time()
    jobs = [
        router.enqueue(JobRequest("t_plain", 1, {"item": "p"})).job_id,
        router.enqueue(JobRequest("t_group", 7, {"item": "g1"})).job_id,
        router.enqueue(JobRequest("t_group", 7, {"item": "g2", "mode": "unrecoverable"})).job_id,
        router.enqueue(JobRequest("t_window", 3, {"item": "w", "provider": "notion"})).job_id,
    ]
    # When a worker runs them (one ends failed: it ran all the same)
    with h.running_worker(broker):
        h.wait_until(lambda: all(h.state(broker, job) in ("completed", "failed") for job in jobs))
    # Then each run is counted once, by its queue, its group and the window that admitted it
    counts = recent_counts(redis_client, namespace, 5)
    assert {field: n for field, n in counts.items() if n} == {
        "q:t_plain.fast": 1,
        "q:t_group.fast": 2,
        "g:t_group.fast|7": 2,
        "q:t_window.fast": 1,
        f"w:{namespace}:window:t_window:notion:ods-3": 1,
    }
    # And each minute's hash is kept for the rates' retention only
    minutes = range(minute_of(started), minute_of(time.time()) + 1)
    ttls = [redis_client.ttl(rates_key(namespace, minute)) for minute in minutes]
    existing = [ttl for ttl in ttls if ttl != -2]  # -2: no run ended in that minute
    assert existing
    assert all(0 < ttl <= KEEP_SECONDS for ttl in existing)
