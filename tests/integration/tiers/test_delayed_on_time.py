"""A delayed job (a retry, a provider's delay, a window's wait) is moved back to its queue
when it is due, not when its delay queue's consumer next polls: the consumer of a delay queue
holding delayed messages waits no longer than the earliest of them needs (``TierConsumer``'s
``next_due``), and the move wakes the queue's consumer (``test_queue_watch``)."""

from __future__ import annotations

import time

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker

#: The default poll interval: a delay queue's consumer used to move a due job up to this late.
POLL_MS = 500
DELAY = 1.5
JOBS = 5


def test_delayed_jobs_run_when_due_not_a_poll_later(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a worker at the default poll interval whose queues have gone idle
    with h.running_worker(broker, poll_ms=POLL_MS, drain=2):
        time.sleep(1.0)
        # When jobs ask to be delayed by 1.5 s, one every 0.37 s (each due while the delay
        # queue's consumer waits out another point of its poll)
        for i in range(JOBS):
            params = {"item": f"late-{i}", "mode": "delay", "times": 1, "delay": DELAY}
            router.enqueue(JobRequest(kind="t_plain", organization_id=1, params=params))
            time.sleep(0.37)
        h.wait_until(
            lambda: all(h.state(broker, f"plain-late-{i}") == "completed" for i in range(JOBS)),
            timeout=20,
        )
    # Then each ran again within 0.15 s of being due (it took 3 ms here; before, the delay
    # queue's consumer moved it when its poll's wait ended: the latest of five jobs was
    # 0.23-0.36 s late in five runs, up to a poll interval)
    events = h.trace(redis_client, namespace)
    lateness = []
    for i in range(JOBS):
        mine = [e for e in events if e["item"] == f"late-{i}"]
        delayed_at = next(e["t"] for e in mine if e["ev"] == "end" and e["run"] == 1)
        ran_at = next(e["t"] for e in mine if e["ev"] == "start" and e["run"] == 2)
        lateness.append(ran_at - delayed_at - DELAY)
    assert max(lateness) < 0.15, [round(x, 3) for x in lateness]
