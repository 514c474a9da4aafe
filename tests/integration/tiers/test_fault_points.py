"""A worker process killed at each step between two Redis writes (``tiers.faults``): fetch
then run, claim then run, run then settle, settle then move on. Another worker finishes the
job; nothing is lost or left stuck, and the handler runs again only where at-least-once
says it must (the run finished but its outcome was never recorded)."""

from __future__ import annotations

import pytest
import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.fair_order import ready_count

#: (fault point, family, handler runs in the end): a run is repeated only when the worker
#: died after the handler returned and before the outcome was settled. A grouped job takes
#: its slot when its batch is fetched, so a kill after the fetch leaves a slot to recover.
CASES = [
    ("fetch.after", "t_plain", 1),
    ("fetch.after", "t_group", 1),
    ("claim.after", "t_group", 1),
    ("run.after", "t_plain", 2),
    ("settle.after", "t_plain", 1),
]
FAST_RECOVERY = {"heartbeat_timeout_ms": 1000, "lease_seconds": 1.0}


@pytest.mark.parametrize(("fault", "kind", "expected_runs"), CASES)
def test_a_worker_killed_between_two_writes_loses_nothing(
    redis_url: str,
    redis_client: redis.Redis,
    namespace: str,
    fault: str,
    kind: str,
    expected_runs: int,
) -> None:
    broker = h.make_broker(redis_url, namespace, **FAST_RECOVERY)
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    job = Router(registry, broker).enqueue(JobRequest(kind, 1, {"item": "f"}))
    # Given a worker process that dies at the fault point
    dying = h.start_worker_process(redis_url, namespace, fault=fault, **FAST_RECOVERY)
    dying.join(timeout=30)
    assert dying.exitcode == -9
    # When another worker takes over (messages back after the heartbeat, slots after the lease)
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, job.job_id) == "completed", timeout=30)
    # Then the job completed, its handler ran no more than at-least-once requires, and
    # neither a group slot nor a queued copy is left behind
    assert int(redis_client.get(f"{namespace}:runs:f") or 0) == expected_runs
    assert broker.jobs.group_state(f"{kind}.fast|1") == (0, 0)
    assert ready_count(redis_client, namespace, f"{kind}.fast") == 0
    broker.close()
