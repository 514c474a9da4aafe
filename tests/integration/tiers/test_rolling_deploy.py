"""A rolling deploy from release 0.1.0, whose scripts served grouped jobs from Dramatiq's list
(no fair order): its workers and API beside this release's on one Redis lose no parked or
queued job, run none twice, and never exceed a group's cap.

An older worker is this release's Python with release 0.1.0's scripts
(``release_0_1_0_lua/``, copied from that release), starting each run as 0.1.0 did: what a
worker does to Redis is its scripts, called with the same arguments.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.beat_log import BeatLog
from tiers.broker import TierBroker
from tiers.fair_order import fair_key, ready_count

RELEASE_LUA = Path(__file__).parent / "release_0_1_0_lua"
QUEUE = "t_group.fast"
CAP = 2


def release_0_1_0(broker: TierBroker) -> TierBroker:
    """Make ``broker`` run release 0.1.0's scripts (in place: its senders share the map), and
    start every run as 0.1.0 did, waiting for start.lua's verdict (a heartbeat log that
    never vouches for a delivery)."""
    prelude = (RELEASE_LUA / "_prelude.lua").read_text()
    scripts: Any = broker.jobs._scripts
    for name in list(scripts):
        source = prelude + "\n" + (RELEASE_LUA / f"{name}.lua").read_text()
        scripts[name] = broker.client.register_script(source)
    broker.jobs.beats = BeatLog(heartbeat_timeout_ms=0)
    return broker


def router_of(broker: TierBroker) -> Router:
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    return Router(registry, broker)


def backlog(prefix: str, orgs: range, each: int) -> list[JobRequest]:
    return [
        JobRequest("t_group", org, {"item": f"{prefix}-{org}-{i}", "sleep": 0.01})
        for i in range(each)
        for org in orgs
    ]


def peak_per_org(events: list[dict[str, Any]]) -> dict[int, int]:
    marks: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for event in events:
        if event["ev"] in ("start", "end"):
            marks[event["org"]].append((event["t"], 1 if event["ev"] == "start" else -1))
    peaks = {}
    for org, points in marks.items():
        running = peak = 0
        for _, delta in sorted(points):
            running += delta
            peak = max(peak, running)
        peaks[org] = peak
    return peaks


def test_older_and_newer_workers_on_one_redis_run_every_job_once(
    redis_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    old = release_0_1_0(h.make_broker(redis_url, namespace))
    new = h.make_broker(redis_url, namespace)
    old_jobs = backlog("old", range(1, 11), 8)
    new_jobs = backlog("new", range(6, 16), 8)
    items = [job.params["item"] for job in old_jobs + new_jobs]

    def ended() -> int:
        return sum(1 for e in h.trace(redis_client, namespace) if e["ev"] == "end")

    # Given the older release's API with a backlog queued and parked in its layout (the list)
    router_of(old).enqueue_many(old_jobs)
    assert redis_client.zcard(fair_key(namespace, QUEUE)) == 0
    try:
        with contextlib.ExitStack() as older:
            # and its workers at work
            older.enter_context(h.running_worker(old, threads=3))
            h.wait_until(lambda: ended() >= 10, timeout=30)
            # When this release's workers join, and its API enqueues beside the old one's jobs
            with h.running_worker(new, threads=3):
                router_of(new).enqueue_many(new_jobs)
                assert redis_client.zcard(fair_key(namespace, QUEUE)) > 0
                h.wait_until(lambda: ended() >= 60, timeout=30)
                # and the older workers stop (drained) while the rest still waits
                older.close()
                assert ended() < len(items)
                h.wait_until(lambda: ended() >= len(items), timeout=60)
    finally:
        old.close()
        new.close()

    # Then every job ran once, to completion
    events = h.trace(redis_client, namespace)
    starts = Counter(e["item"] for e in events if e["ev"] == "start")
    assert starts == Counter(items)
    for item in items:
        record = new.jobs.record(f"group-{item}")
        assert record is not None and record["state"] == "completed" and record["attempts"] == "1"
    # And no group ever ran more than its cap at once, and no slot or queued copy is left
    assert max(peak_per_org(events).values()) <= CAP
    for org in range(1, 16):
        assert new.jobs.group_state(f"{QUEUE}|{org}") == (0, 0)
    assert ready_count(redis_client, namespace, QUEUE) == 0
    assert redis_client.hlen(f"{namespace}:{QUEUE}.msgs") == 0
