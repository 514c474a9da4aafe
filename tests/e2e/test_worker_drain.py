"""SIGTERM to a worker mid-job: the job finishes or returns to the queue; nothing is lost."""

from __future__ import annotations

import os
import signal

import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h


def test_sigterm_mid_job_finishes_in_flight_and_returns_the_rest(
    redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace)
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    # Given 20 jobs of 0.5 s and a worker process with 2 threads (drain period 5 s)
    router.enqueue_many(
        [JobRequest("t_plain", 1, {"item": str(i), "sleep": 0.5}) for i in range(20)]
    )
    worker = h.start_worker_process(redis_url, namespace, threads=2)
    h.wait_until(lambda: len(h.trace(redis_client, namespace)) >= 3)
    # When it gets SIGTERM mid-job
    os.kill(worker.pid, signal.SIGTERM)  # type: ignore[arg-type]
    worker.join(30)
    if worker.exitcode is None:
        h.dump_stacks(worker)  # to stderr, shown with the failure
    assert worker.exitcode == 0
    events = h.trace(redis_client, namespace)
    started = {e["item"] for e in events if e["ev"] == "start"}
    ended = {e["item"] for e in events if e["ev"] == "end"}
    # Then every job it started finished, and it took no new work after the signal
    assert started == ended
    assert 0 < len(started) < 20
    # and every other job is back on its queue, ready for the next worker
    assert redis_client.llen(f"{namespace}:t_plain.fast") == 20 - len(started)
    with h.running_worker(broker, threads=4):
        h.wait_until(
            lambda: all(h.state(broker, f"plain-{i}") == "completed" for i in range(20)),
            timeout=30,
        )
    runs = [int(redis_client.get(f"{namespace}:runs:{i}") or 0) for i in range(20)]
    assert runs == [1] * 20
    broker.close()
