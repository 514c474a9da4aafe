"""Each tier on a Redis of its own (``tiers.tier_brokers``): the control Redis is this test's
Redis (its namespace), the fast tier runs on one extra redis-server and the slow tier on
another, all through the real platform (``bootstrap``), its router and real workers.

Checked: a tier's job records and queues exist only in its Redis; each tier drains on its own
worker; a job id is deduplicated exactly (in its tier's Redis) and a follow-up a fast job
enqueues lands in the slow tier's Redis; provider windows stay on the control Redis; a kill
switch (PostgreSQL) skips jobs in both tiers; the API finds jobs in either Redis.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pydantic import BaseModel

from router.requests import JobRequest
from services.app.api import create_app
from services.app.bootstrap import Platform
from services.app.dashboard.snapshot import take_snapshot
from tests import platform_harness as h
from tests.fixtures_platform import AUTH, MakePlatform
from tests.fixtures_redis import MakeRedisServer
from tests.platform_harness import serving, wait_until
from tiers.fair_order import ready_count
from tiers.families import Family
from tiers.policies import WindowRule
from tiers.tier_brokers import TierBrokers

RUNS: list[tuple[str, str]] = []  # (family, item) of every run, in this process
_RUNS_LOCK = threading.Lock()
_PLATFORM: dict[str, Platform] = {}


class Params(BaseModel):
    item: str
    then_slow: str = ""


def run_fast(organization_id: int, item: str, then_slow: str) -> None:
    with _RUNS_LOCK:
        RUNS.append(("tr_fast", item))
    if then_slow:  # a follow-up in the other tier, through the worker's own router
        _PLATFORM["worker"].router.enqueue(
            JobRequest("tr_slow", organization_id, {"item": then_slow})
        )


def run_slow(organization_id: int, item: str, then_slow: str) -> None:
    with _RUNS_LOCK:
        RUNS.append(("tr_slow", item))


def test_families(flag: str) -> list[Family]:
    common: dict[str, Any] = {"params": Params, "pause_flag": flag}
    return [
        Family(
            name="tr_fast",
            kind="tr_fast",
            handler=run_fast,
            job_id=lambda org, p: f"tr-fast-{org}-{p.item}",
            fixed_tier="fast",
            group_caps={"fast": 2},
            windows={"*": WindowRule(10_000, 60.0)},
            **common,
        ),
        Family(
            name="tr_slow",
            kind="tr_slow",
            handler=run_slow,
            job_id=lambda org, p: f"tr-slow-{org}-{p.item}",
            fixed_tier="slow",
            **common,
        ),
    ]


test_families.__test__ = False  # type: ignore[attr-defined]


@contextlib.contextmanager
def tier_worker(platform: Platform, tier: str) -> Iterator[None]:
    """A real worker of ``tier`` (its broker, its queues) in a thread of this process."""
    with serving(platform.brokers.of_tier(tier), platform.registry.queues_of_tier(tier), threads=2):
        yield


@pytest.fixture
def flag() -> str:
    return f"pause_api2_tier_redis_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def servers(make_redis_server: MakeRedisServer, redis_url: str) -> dict[str, str]:
    """The control Redis (the test's) and one server each for the fast and slow tiers."""
    return {"control": redis_url, "fast": make_redis_server(), "slow": make_redis_server()}


@pytest.fixture
def clients(servers: dict[str, str]) -> Iterator[dict[str, redis.Redis]]:
    made = {name: redis.Redis.from_url(url) for name, url in servers.items()}
    yield made
    for client in made.values():
        client.close()


def _keys(client: redis.Redis, namespace: str) -> set[str]:
    return {key.decode() for key in client.scan_iter(match=f"{namespace}:*", count=1000)}


def test_each_tier_on_its_own_redis(
    make_platform: MakePlatform,
    servers: dict[str, str],
    clients: dict[str, redis.Redis],
    namespace: str,
    flag: str,
) -> None:
    settings: dict[str, Any] = {
        "fast_redis_url": servers["fast"],
        "slow_redis_url": servers["slow"],
    }
    families = test_families(flag)
    api = make_platform(services=[], families=families, **settings)
    worker = make_platform(services=[], families=families, component="worker", **settings)
    _PLATFORM["worker"] = worker
    RUNS.clear()
    api.flags.set(flag, False)
    try:
        # Given jobs of both tiers enqueued through the API's router in one batch
        requests = [JobRequest("tr_fast", 1 + i % 3, {"item": f"f{i}"}) for i in range(12)]
        requests += [JobRequest("tr_slow", 1 + i % 3, {"item": f"s{i}"}) for i in range(12)]
        requests.append(JobRequest("tr_fast", 7, {"item": "chain", "then_slow": "followed"}))
        answers = api.router.enqueue_many(requests)
        assert {a.outcome for a in answers} == {"added"}

        # Then each job's record and message are in its tier's Redis and nowhere else
        fast_keys, slow_keys = _keys(clients["fast"], namespace), _keys(clients["slow"], namespace)
        control_keys = _keys(clients["control"], namespace)
        for answer in answers:
            record = f"{namespace}:job:{answer.job_id}"
            own, others = (
                (fast_keys, (slow_keys, control_keys))
                if answer.queue.endswith(".fast")
                else (slow_keys, (fast_keys, control_keys))
            )
            assert record in own, answer
            assert all(record not in keys for keys in others), answer
        assert ready_count(clients["fast"], namespace, "tr_fast.fast") > 0  # under the cap of 2
        assert clients["fast"].exists(f"{namespace}:group:tr_fast.fast|1:parked")
        assert clients["slow"].llen(f"{namespace}:tr_slow.slow") == 12
        assert not any(key.startswith(f"{namespace}:tr_") for key in control_keys)

        # And the operators' views read each tier from its Redis
        rows = {row.queue: row for row in take_snapshot(api).queues}
        assert rows["tr_slow.slow"].waiting == 12
        fast_row = rows["tr_fast.fast"]
        assert (fast_row.waiting, fast_row.parked) == (7, 6)  # orgs 1-3: 4 jobs, cap 2; org 7: 1
        scrape = create_app(api).test_client().get("/metrics").get_data(as_text=True)
        assert 'speedtier_queue_depth{family="tr_slow",state="ready",tier="slow"} 12.0' in scrape
        assert 'speedtier_queue_depth{family="tr_fast",state="parked",tier="fast"} 6.0' in scrape

        # And a live id is deduplicated exactly, in its tier's Redis
        again = api.router.enqueue_many(
            [JobRequest("tr_fast", 1, {"item": "f0"}), JobRequest("tr_slow", 1, {"item": "s0"})]
        )
        assert [a.outcome for a in again] == ["deduplicated", "deduplicated"]
        assert clients["slow"].llen(f"{namespace}:tr_slow.slow") == 12

        # When only the slow tier's worker runs, only the slow tier drains
        with tier_worker(worker, "slow"):
            wait_until(lambda: _states(api, answers, ".slow") == {"completed"}, timeout=30)
        assert {family for family, _ in RUNS} == {"tr_slow"}
        assert _states(api, answers, ".fast") <= {"waiting", "parked"}

        # And when the fast tier's runs, it drains too, and its follow-up lands in the slow
        # tier's Redis (the worker's router routes it there)
        with tier_worker(worker, "fast"):
            wait_until(lambda: _states(api, answers, ".fast") == {"completed"}, timeout=30)
        follow_up = f"{namespace}:job:tr-slow-7-followed"
        wait_until(lambda: bool(clients["slow"].exists(follow_up)), timeout=10)
        assert not clients["fast"].exists(follow_up)
        assert not clients["control"].exists(follow_up)
        with tier_worker(worker, "slow"):
            wait_until(lambda: _state(api, "tr-slow-7-followed") == "completed", timeout=30)
        assert sorted(item for family, item in RUNS if family == "tr_fast") == sorted(
            [f"f{i}" for i in range(12)] + ["chain"]
        )
        assert len(RUNS) == 12 + 13 + 1  # every job ran exactly once

        # And the fast family's provider window counted its starts on the control Redis only
        windows = [k for k in _keys(clients["control"], namespace) if ":window:tr_fast:" in k]
        assert windows
        assert not [k for k in _keys(clients["fast"], namespace) if ":window:" in k]

        # And a finished id enqueued again is replaced in its own Redis, not added elsewhere
        (replaced,) = api.router.enqueue_many([JobRequest("tr_slow", 1, {"item": "s0"})])
        assert replaced.outcome == "replaced"
        assert not clients["fast"].exists(f"{namespace}:job:tr-slow-1-s0")

        # And the API finds a job in whichever Redis holds it
        client = create_app(api).test_client()
        for job_id, queue in (("tr-fast-1-f0", "tr_fast.fast"), ("tr-slow-1-s0", "tr_slow.slow")):
            response = client.get(f"/internal/jobs/{job_id}", headers=AUTH)
            assert response.status_code == 200, response.get_json()
            assert response.get_json()["queue"] == queue
        assert client.get("/internal/jobs/tr-fast-9-none", headers=AUTH).status_code == 404

        # When the kill switch is raised, queued jobs of both tiers complete as skipped
        api.flags.set(flag, True)
        paused = api.router.enqueue_many(
            [JobRequest("tr_fast", 2, {"item": "p"}), JobRequest("tr_slow", 2, {"item": "p"})]
        )
        runs_before = len(RUNS)
        with tier_worker(worker, "fast"), tier_worker(worker, "slow"):
            wait_until(lambda: _states(api, paused, "") == {"skipped"}, timeout=30)
        assert len(RUNS) == runs_before
    finally:
        api.flags.set(flag, False)
        _PLATFORM.clear()


def _state(platform: Platform, job_id: str) -> str:
    return (platform.brokers.record(job_id) or {}).get("state", "")


def _states(platform: Platform, answers: list[Any], suffix: str) -> set[str]:
    return {_state(platform, a.job_id) for a in answers if a.queue.endswith(suffix)}


def test_a_record_left_in_another_tiers_redis_is_passed_over(
    make_redis_server: MakeRedisServer, redis_url: str, namespace: str
) -> None:
    # Given a control Redis and a slow tier moved to a Redis of its own
    slow_url = make_redis_server()
    control, slow = h.make_broker(redis_url, namespace), h.make_broker(slow_url, namespace)
    brokers = TierBrokers(control, {"slow": slow})
    try:
        # When a slow job's finished record was left behind in the control Redis
        control.client.hset(
            f"{namespace}:job:j-1", mapping={"state": "completed", "queue": "x.slow"}
        )
        # Then it is not the job's: the lookup passes it over
        assert brokers.find("j-1") is None
        slow.client.hset(f"{namespace}:job:j-1", mapping={"state": "waiting", "queue": "x.slow"})
        found = brokers.find("j-1")
        assert found is not None and found[0] is slow and found[1]["state"] == "waiting"
        assert brokers.broker_of_job("j-1") is slow
        # And a fast job's record is found on the control Redis, the fast tier's
        control.client.hset(f"{namespace}:job:j-2", mapping={"state": "active", "queue": "y.fast"})
        assert brokers.broker_of_job("j-2") is control
        assert brokers.record("j-3") is None
    finally:
        slow.client.delete(f"{namespace}:job:j-1")
        brokers.close()
