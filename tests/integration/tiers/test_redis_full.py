"""A worker on a Redis out of memory (``maxmemory`` under ``noeviction``): it waits, logs
the outage once (not a CRITICAL traceback per poll), keeps the outcome of a run that ended
meanwhile and records it once Redis has room again. A Redis of the test's own."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tests.fixtures_redis import MakeRedisServer


def request(item: str, **params: object) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item, **params})


def test_a_full_redis_is_an_outage_logged_once_and_no_outcome_is_lost(
    make_redis_server: MakeRedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = make_redis_server()
    client = redis.Redis.from_url(url)
    broker = h.make_broker(url, namespace)
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    client.config_set("maxmemory-policy", "noeviction")
    caplog.set_level(logging.INFO)
    try:
        with h.running_worker(broker, threads=2):
            # Given a job running when Redis fills up
            router.enqueue(request("long", sleep=1.0))
            h.wait_until(lambda: client.get(f"{namespace}:runs:long") is not None)
            client.config_set("maxmemory", 1)  # below what it holds: every write refused
            # When the worker polls on the full Redis for a while (the run ends meanwhile)
            time.sleep(2.5)
            # its outcome is kept, not lost, and no attempt is spent on the full Redis
            assert h.state(broker, "plain-long") == "active"
            # Then Redis has room again
            client.config_set("maxmemory", 0)
            h.wait_until(lambda: h.state(broker, "plain-long") == "completed")
            assert (broker.jobs.record("plain-long") or {}).get("failures") == "0"
            router.enqueue(request("after"))
            h.wait_until(lambda: h.state(broker, "plain-after") == "completed")
    finally:
        broker.close()
        client.close()
    # And the outage was logged as one, with no CRITICAL traceback per poll
    critical = [r for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert critical == []
    refusals = [
        r for r in caplog.records if r.levelno == logging.WARNING and "maxmemory" in r.getMessage()
    ]
    # The worker's consumers reported it once (before: a CRITICAL traceback per consumer per
    # poll, some 50 polls x 12 consumers here); the other threads meeting it (the settle
    # sender, the delayed run...) once each
    consumers = [r for r in refusals if r.name == "tiers.consumer"]
    assert len(consumers) == 1, [r.getMessage() for r in consumers]
    assert len(refusals) <= 8, [r.getMessage() for r in refusals]
    ended = [r for r in caplog.records if r.name == "tiers.consumer" and "again" in r.getMessage()]
    assert len(ended) == 1
