"""Run in a subprocess by test_sentry.py: Sentry is process-global, so the test process
itself never initialises it. argv: dsn-or-empty, redis url, namespace."""

from __future__ import annotations

import sys

import sentry_sdk

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from shared.observability import init_sentry, warn
from tests import platform_harness as h


def main(dsn: str, redis_url: str, namespace: str) -> None:
    started = init_sentry(dsn or None, environment="test", component="probe")
    print(f"started={started}")
    warn("kb fallback delivery", fingerprint=["speedtier", "probe-warning"], organization_id=7)
    broker = h.make_broker(redis_url, namespace)  # after init: the integration patches brokers
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    router.enqueue_many(
        [
            JobRequest("t_plain", 1, {"item": "broken", "mode": "unrecoverable"}),
            JobRequest("t_plain", 1, {"item": "missing", "mode": "missing"}),
            JobRequest("t_plain", 1, {"item": "delayed", "mode": "delay", "times": 1}),
            JobRequest("t_plain", 1, {"item": "poisoned"}),
        ]
    )
    # As two runs that died leave the record: the next start counts the second death and,
    # with the one before, fails the job as worker_died (at the default limit of 3, a third)
    broker.jobs.client.hset(
        broker.jobs.record_key("plain-poisoned"), mapping={"epoch": 2, "open": 2, "unsettled": 2}
    )
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-broken") == "failed")
        h.wait_until(lambda: h.state(broker, "plain-missing") == "record_missing")
        h.wait_until(lambda: h.state(broker, "plain-delayed") == "completed")
        h.wait_until(lambda: h.state(broker, "plain-poisoned") == "failed")
    sentry_sdk.flush(timeout=5)
    broker.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
