"""Operator cancels (tiers.cancellation, tiers.middleware.cancel) on real Redis with a real
worker: a running job stops at its next cancel point, one that never reaches one is stopped
after the grace, a queued job never runs, and each ends ``cancelled``, never retried, its
group slot passed on. The worker publishes itself and what it runs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.cancellation import cancels_key, live_workers, request_cancel
from tiers.middleware import cancel as cancel_middleware


@pytest.fixture
def broker(redis_url: str, namespace: str) -> Iterator[TierBroker]:
    broker = h.make_broker(redis_url, namespace, cancel_grace_seconds=1.5)
    yield broker
    broker.close()


def request(item: str, kind: str = "t_plain", **params: object) -> JobRequest:
    return JobRequest(kind=kind, organization_id=3, params={"item": item, **params})


def runs(client: redis.Redis, namespace: str, item: str) -> int:
    return int(client.get(f"{namespace}:runs:{item}") or 0)


def test_a_running_job_stops_at_its_next_cancel_point(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a long job (10 s of steps) running in a cap-1 group, with one more parked behind
    job_id = router.enqueue(request("c1", kind="t_serial", mode="steps", times=200)).job_id
    behind = router.enqueue(request("c2", kind="t_serial")).job_id
    assert h.state(broker, behind) == "parked"
    with h.running_worker(broker, threads=2):
        h.wait_until(lambda: h.state(broker, job_id) == "active", timeout=10)
        # The worker says what it runs, and which queues it serves
        h.wait_until(lambda: _running_jobs(redis_client, namespace) == [job_id], timeout=5)
        [worker], unpublished = live_workers(redis_client, namespace, 60_000)
        assert unpublished == 0 and "t_serial.fast" in worker.queues and worker.pid > 0
        # When an operator cancels it (twice: the second is refused as already asked)
        assert request_cancel(redis_client, namespace, job_id, "ann") == "requested"
        assert request_cancel(redis_client, namespace, job_id, "bob") == "already"
        # Then it ends cancelled at its next step, long before the grace, and the job
        # parked behind it runs
        h.wait_until(lambda: h.state(broker, job_id) == "cancelled", timeout=1.4)
        h.wait_until(lambda: h.state(broker, behind) == "completed", timeout=10)
    record = broker.jobs.record(job_id) or {}
    assert record["last_error"] == "Cancelled: cancelled by ann"
    assert record["cancel_by"] == "ann" and record["failures"] == "0"
    assert runs(redis_client, namespace, "c1") == 1  # never retried
    assert not redis_client.hexists(cancels_key(namespace), job_id)  # the entry is gone
    assert request_cancel(redis_client, namespace, job_id, "ann") == "not_live"
    assert request_cancel(redis_client, namespace, "no-such-job", "ann") == "no_job"


def test_a_job_that_never_reaches_a_cancel_point_is_stopped_after_the_grace(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    job_id = router.enqueue(request("h1", mode="hang", times=400)).job_id  # 20 s
    with h.running_worker(broker, threads=1):
        h.wait_until(lambda: h.state(broker, job_id) == "active", timeout=10)
        assert request_cancel(redis_client, namespace, job_id, "ann") == "requested"
        # Not before the grace (1.5 s)...
        h.wait_until(lambda: h.state(broker, job_id) == "cancelled", timeout=6)
        cancelled_after = _elapsed(broker, job_id)
    assert cancelled_after >= 1.5
    assert runs(redis_client, namespace, "h1") == 1


def test_a_queued_job_is_cancelled_without_running(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    job_id = router.enqueue(request("q1")).job_id
    assert request_cancel(redis_client, namespace, job_id, "ann") == "requested"
    with h.running_worker(broker, threads=1):
        # the worker learns of cancels within a second; the job is delivered after that
        h.wait_until(lambda: h.state(broker, job_id) in ("cancelled", "completed"), timeout=10)
    assert h.state(broker, job_id) == "cancelled"
    assert runs(redis_client, namespace, "q1") == 0


def test_a_job_cancelled_before_its_worker_started_never_runs_however_slow_the_first_read(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The watch reads the cancels while the worker's threads start and fetch; a run that
    # comes first waits for that read.
    job_id = router.enqueue(request("q2")).job_id
    assert request_cancel(redis_client, namespace, job_id, "ann") == "requested"
    read = cancel_middleware.read_cancels

    def slow_read(client: redis.Redis, of: str) -> object:
        time.sleep(0.5)
        return read(client, of)

    monkeypatch.setattr(cancel_middleware, "read_cancels", slow_read)
    with h.running_worker(broker, threads=1):
        h.wait_until(lambda: h.state(broker, job_id) in ("cancelled", "completed"), timeout=10)
    assert h.state(broker, job_id) == "cancelled"
    assert runs(redis_client, namespace, "q2") == 0


def _running_jobs(client: redis.Redis, namespace: str) -> list[str]:
    workers, _ = live_workers(client, namespace, 60_000)
    return [run["job"] for worker in workers for run in worker.running]


def _elapsed(broker: TierBroker, job_id: str) -> float:
    record = broker.jobs.record(job_id) or {}
    return (int(record["finished_at"]) - int(record["cancel_at"])) / 1000


def test_a_broker_serving_a_second_worker_watches_again(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    with h.running_worker(broker, threads=1):
        pass
    # The same broker's next worker still sees cancels and publishes itself
    job_id = router.enqueue(request("s1", mode="steps", times=200)).job_id
    with h.running_worker(broker, threads=1):
        h.wait_until(lambda: _running_jobs(redis_client, namespace) == [job_id], timeout=5)
        assert request_cancel(redis_client, namespace, job_id, "ann") == "requested"
        h.wait_until(lambda: h.state(broker, job_id) == "cancelled", timeout=1.4)
