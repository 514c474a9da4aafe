"""Outcomes against real Redis and real Dramatiq workers."""

from __future__ import annotations

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker


def enqueue(router: Router, item: str, **params: object) -> str:
    answer = router.enqueue(JobRequest("t_plain", 1, {"item": item, **params}))
    return answer.job_id


def finished(broker: TierBroker, job_id: str, expected: str) -> None:
    def done() -> bool:
        record = broker.jobs.record(job_id)
        return record is not None and record["state"] == expected

    h.wait_until(done)


def starts(client: redis.Redis, namespace: str, job_id: str) -> list[float]:
    return [e["t"] for e in h.trace(client, namespace) if e["job"] == job_id and e["ev"] == "start"]


def test_delay_does_not_spend_an_attempt(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job that is delayed more times than it has attempts
    job = enqueue(router, "d", mode="delay", times=4)
    with h.running_worker(broker):
        finished(broker, job, "completed")
    record = broker.jobs.record(job)
    assert record is not None
    # Then it still completes, with no failure counted
    assert len(starts(redis_client, namespace, job)) == 5
    assert record["failures"] == "0"


def test_unrecoverable_is_not_retried(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    job = enqueue(router, "u", mode="unrecoverable")
    with h.running_worker(broker):
        finished(broker, job, "failed")
        h.wait_until(lambda: redis_client.zcard(f"{namespace}:t_plain.fast.XQ") == 1)
    assert len(starts(redis_client, namespace, job)) == 1
    assert "Unrecoverable" in broker.jobs.record(job)["last_error"]  # type: ignore[index]


def test_record_missing_completes(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    job = enqueue(router, "m", mode="missing")
    with h.running_worker(broker):
        finished(broker, job, "record_missing")
    assert len(starts(redis_client, namespace, job)) == 1
    assert redis_client.zcard(f"{namespace}:t_plain.fast.XQ") == 0


@pytest.mark.parametrize("mode", ["retryable", "crash"])
def test_retries_follow_the_family_policy(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str, mode: str
) -> None:
    # Given a family with 3 attempts and exponential backoff from 0.3 s
    job = enqueue(router, "r", mode=mode)
    with h.running_worker(broker):
        finished(broker, job, "failed")
    times = starts(redis_client, namespace, job)
    # Then it ran exactly 3 times, waiting at least 0.3 s then 0.6 s
    assert len(times) == 3
    assert times[1] - times[0] >= 0.3
    assert times[2] - times[1] >= 0.6
    assert broker.jobs.record(job)["failures"] == "3"  # type: ignore[index]


def test_a_retry_that_then_succeeds_completes(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    job = enqueue(router, "f", mode="flaky", times=1)
    with h.running_worker(broker):
        finished(broker, job, "completed")
    assert len(starts(redis_client, namespace, job)) == 2
    assert broker.jobs.record(job)["failures"] == "1"  # type: ignore[index]


def test_a_provider_answering_429_forever_ends_the_job(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a family allowing 2 consecutive provider delays per attempt and 2 attempts,
    # and a job whose provider asks it to wait (Retry-After) every time it runs
    answer = router.enqueue(
        JobRequest("t_capped", 1, {"item": "f", "mode": "delay", "times": 10_000, "delay": 0.05})
    )
    with h.running_worker(broker):
        finished(broker, answer.job_id, "failed")
    record = broker.jobs.record(answer.job_id)
    assert record is not None
    # Then each attempt ran three times (two delays, the third spent it), and the job failed
    assert len(starts(redis_client, namespace, answer.job_id)) == 6
    assert record["failures"] == "2"
    assert record["last_error"].startswith("DelaysExhausted: 2 provider delay(s)")
    assert redis_client.zcard(f"{namespace}:t_capped.fast.XQ") == 1
