"""A worker whose host clock runs ahead takes nothing from the others by it: the lease
upkeep's reap and the dead-worker look judge leases and heartbeats by Redis's clock. The
judge runs in a child process whose wall clock libfaketime puts 70 s ahead: past what a
lease leaves (three quarters of it, 22.5 s) and the heartbeat timeout (60 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import redis

from testkit.child_process import child_env
from testkit.faketime import shifted_clock_env

#: The child: one reap and one dead-worker look of a worker of ``namespace``, whose answers
#: it prints (slots reaped, the workers it took for dead) with its own clock's time.
JUDGE = """
import json, sys, time
from tiers.broker import TierBroker
from tiers.dead_workers import DeadWorkers

url, namespace = sys.argv[1], sys.argv[2]
broker = TierBroker(namespace=namespace, url=url, heartbeat_timeout_ms=60_000)
reaped = broker.jobs.reap()
dead = DeadWorkers(broker, lambda: ["judged"], 0.5).look()
print(json.dumps({"reaped": reaped, "dead": dead, "clock": time.time()}))
"""


def judge(redis_url: str, namespace: str, offset: str) -> dict[str, object]:
    """One reap and one look from a worker process whose clock is ``offset`` from this one."""
    done = subprocess.run(
        [sys.executable, "-c", JUDGE, redis_url, namespace],
        env=child_env(shifted_clock_env(offset)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_a_worker_whose_clock_runs_ahead_reaps_no_running_slot_and_takes_no_live_worker_for_dead(
    redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    now_ms = int(time.time() * 1000)
    group, leases = f"{namespace}:group:org-1", f"{namespace}:__leases__"
    # Given a running job whose lease runs 30 s more, and a worker that beat just now
    redis_client.zadd(group, {"running-job": now_ms + 30_000})
    redis_client.zadd(leases, {"org-1": now_ms + 30_000})
    redis_client.zadd(f"{namespace}:__heartbeats__", {"live-worker": now_ms})
    # When a worker 70 s ahead reaps and looks for dead workers
    answer = judge(redis_url, namespace, "+70s")
    # Then (its clock is indeed ahead) it took neither
    assert answer["clock"] >= time.time() + 69  # type: ignore[operator]
    assert answer["reaped"] == 0 and answer["dead"] == []
    assert redis_client.zscore(group, "running-job") == now_ms + 30_000
    # And what is old by Redis's clock, it does take: a lease that ran out 1 s ago and a
    # worker silent for 61 s
    redis_client.zadd(group, {"running-job": now_ms - 1_000})
    redis_client.zadd(leases, {"org-1": now_ms - 1_000})
    redis_client.zadd(f"{namespace}:__heartbeats__", {"live-worker": now_ms - 61_000})
    answer = judge(redis_url, namespace, "+70s")
    assert answer["reaped"] == 1 and answer["dead"] == ["live-worker"]
    assert redis_client.zscore(group, "running-job") is None


def test_a_worker_whose_clock_runs_behind_still_reaps_what_ran_out(
    redis_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    now_ms = int(time.time() * 1000)
    group, leases = f"{namespace}:group:org-2", f"{namespace}:__leases__"
    # Given a lease that ran out 1 s ago and a worker silent for 61 s
    redis_client.zadd(group, {"stopped-job": now_ms - 1_000})
    redis_client.zadd(leases, {"org-2": now_ms - 1_000})
    redis_client.zadd(f"{namespace}:__heartbeats__", {"dead-worker": now_ms - 61_000})
    # When a worker 70 s behind reaps and looks: by its own clock neither would be due yet
    answer = judge(redis_url, namespace, "-70s")
    # Then both are taken all the same (and the judge itself: its own heartbeat, written from
    # its clock, is 70 s old by Redis's, which is why a host that far off does not start)
    assert answer["reaped"] == 1 and "dead-worker" in answer["dead"]  # type: ignore[operator]
