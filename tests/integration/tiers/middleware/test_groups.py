"""Fair per-organization groups with real Dramatiq worker processes."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.fair_order import ready_count


@pytest.fixture
def broker(redis_url: str, namespace: str) -> Iterator[TierBroker]:
    """Short group leases, so a test sees a dead worker's slot come back."""
    broker = h.make_broker(redis_url, namespace, lease_seconds=1.0, heartbeat_timeout_ms=2000)
    yield broker
    broker.close()


def max_concurrency(events: list[dict[str, Any]]) -> dict[int, int]:
    """Per organization, the most runs that overlapped in time."""
    points: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for event in events:
        points[event["org"]].append((event["t"], 1 if event["ev"] == "start" else -1))
    peaks = {}
    for org, marks in points.items():
        running = peak = 0
        for _t, delta in sorted(marks, key=lambda m: (m[0], m[1])):
            running += delta
            peak = max(peak, running)
        peaks[org] = peak
    return peaks


def test_group_cap_holds_across_two_worker_processes(
    router: Router, redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    # Given 3 organizations with 12 jobs each in a family capped at 2 per organization
    requests = [
        JobRequest("t_group", org, {"item": f"{org}-{i}", "sleep": 0.05})
        for org in (1, 2, 3)
        for i in range(12)
    ]
    router.enqueue_many(requests)
    # When two worker processes with 4 threads each drain them
    workers = [h.start_worker_process(redis_url, namespace, threads=4) for _ in range(2)]
    try:
        h.wait_until(
            lambda: sum(1 for e in h.trace(redis_client, namespace) if e["ev"] == "end") == 36,
            timeout=60,
        )
    finally:
        for worker in workers:
            worker.terminate()
            worker.join(10)
    # Then no organization ever had more than 2 running at once
    peaks = max_concurrency(h.trace(redis_client, namespace))
    assert set(peaks) == {1, 2, 3}
    assert max(peaks.values()) <= 2
    assert max(peaks.values()) == 2  # and the cap was actually used


def test_small_organizations_are_not_starved_by_a_backlog(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given organization 1 with 300 queued jobs, then organizations 2..11 with one each
    router.enqueue_many(
        [JobRequest("t_group", 1, {"item": f"big-{i}", "sleep": 0.01}) for i in range(300)]
    )
    router.enqueue_many(
        [JobRequest("t_group", org, {"item": f"small-{org}"}) for org in range(2, 12)]
    )
    # Then only the cap's worth of the backlog sits in the shared queue
    assert ready_count(redis_client, namespace, "t_group.fast") == 2 + 10
    # When a worker drains the tier
    with h.running_worker(broker, threads=2):
        h.wait_until(
            lambda: sum(1 for e in h.trace(redis_client, namespace) if e["ev"] == "end") >= 60,
            timeout=60,
        )
    starts = [e for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    small_positions = [i for i, e in enumerate(starts) if e["org"] != 1]
    # Then every small organization started within its round-robin share, not after the
    # backlog: all ten within the first 2 (cap) + 10 + a few starts
    assert len(small_positions) == 10
    assert max(small_positions) < 16


def test_a_killed_workers_slot_comes_back_within_the_lease(
    router: Router, broker: TierBroker, redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    # Given a serial group (cap 1) whose first job runs in a worker that will be SIGKILLed
    router.enqueue(JobRequest("t_serial", 7, {"item": "stuck", "sleep": 30}))
    victim = h.start_worker_process(
        redis_url, namespace, threads=1, lease_seconds=1.0, heartbeat_timeout_ms=2000
    )
    h.wait_until(lambda: any(e["ev"] == "start" for e in h.trace(redis_client, namespace)))
    router.enqueue(JobRequest("t_serial", 7, {"item": "next"}))
    assert broker.jobs.record("serial-next")["state"] == "parked"  # type: ignore[index]
    # When the worker dies without a word
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    victim.join(5)
    # Then a surviving worker gets the slot back once the 1 s lease runs out
    with h.running_worker(broker, threads=2):
        h.wait_until(lambda: h.state(broker, "serial-next") == "completed", timeout=10)
    # and the dead worker's job is not lost: it is still owed a run (redelivery)
    assert h.state(broker, "serial-stuck") in {"active", "waiting", "parked"}
