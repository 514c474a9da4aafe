"""Retry and discard of failed jobs (tiers.dead_letters) on real Redis with a real worker:
a retried job runs again once, under its id, through its group; a stale or doubled action
is refused; and the measured rates count the runs."""

from __future__ import annotations

import threading

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.dead_letters import DeadLetters
from tiers.run_rates import recent_counts


def request(item: str, kind: str = "t_plain", org: int = 1, **params: object) -> JobRequest:
    return JobRequest(kind=kind, organization_id=org, params={"item": item, **params})


def fail_for_good(router: Router, broker: TierBroker, item: str, kind: str = "t_plain") -> str:
    """Run a job that fails three times (its policy's attempts) and wait for its dead letter."""
    job_id = router.enqueue(request(item, kind=kind, mode="flaky", times=3)).job_id
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, job_id) == "failed")
    return job_id


def test_a_retried_job_runs_again_once_and_keeps_its_id(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job that failed for good, its message dead-lettered
    job_id = fail_for_good(router, broker, "r1")
    letters = DeadLetters(broker.jobs)
    assert letters.counts(["t_plain.fast"]) == {"t_plain.fast": 1}
    [letter] = letters.latest(["t_plain.fast"])
    assert letter.job_id == job_id and letter.actionable
    # When an operator retries it (twice: a double click)
    assert letters.retry(job_id, "ann") == "waiting"
    assert letters.retry(job_id, "ann") == "not_failed"
    # Then the dead letter is gone, the job runs once more (run 4 succeeds) and completes
    assert letters.counts(["t_plain.fast"]) == {"t_plain.fast": 0}
    record = broker.jobs.record(job_id) or {}
    assert record["retried_by"] == "ann" and record["failures"] == "0"
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, job_id) == "completed")
    assert redis_client.get(f"{namespace}:runs:r1") == b"4"
    # And an enqueue of the same id while it was waiting would have been a duplicate
    assert (broker.jobs.record(job_id) or {})["attempts"] == "4"
    counts = recent_counts(redis_client, namespace, 5)
    assert counts["q:t_plain.fast"] == 4


def test_a_retry_through_a_full_group_parks(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    # Given a failed job of a group with cap 1, and the group's slot taken by a waiting job
    job_id = fail_for_good(router, broker, "g1", kind="t_serial")
    router.enqueue(request("g2", kind="t_serial"))
    # When it is retried, Then it waits for its group like any enqueue would
    assert DeadLetters(broker.jobs).retry(job_id, "ann") == "parked"
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, job_id) == "completed")


def test_discard_drops_the_dead_letter_and_names_who(router: Router, broker: TierBroker) -> None:
    job_id = fail_for_good(router, broker, "d1")
    letters = DeadLetters(broker.jobs)
    assert letters.discard(job_id, "bob") == "discarded"
    record = broker.jobs.record(job_id) or {}
    assert record["state"] == "failed" and record["discarded_by"] == "bob"
    assert letters.counts(["t_plain.fast"]) == {"t_plain.fast": 0}
    # A retry after the discard has nothing to send back
    assert letters.retry(job_id, "bob") == "gone"
    assert letters.discard(job_id, "bob") == "gone"


def test_actions_on_unknown_or_live_jobs_are_refused(router: Router, broker: TierBroker) -> None:
    letters = DeadLetters(broker.jobs)
    assert letters.retry("no-such-job", "ann") == "not_failed"
    assert letters.discard("no-such-job", "ann") == "not_failed"
    job_id = router.enqueue(request("live")).job_id
    assert letters.retry(job_id, "ann") == "not_failed"
    assert letters.discard(job_id, "ann") == "not_failed"


def test_concurrent_retries_send_the_job_back_once(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a failed job, and sixteen operators (or a hammered button) retrying it at once
    job_id = fail_for_good(router, broker, "race")
    letters = DeadLetters(broker.jobs)
    answers: list[str] = []
    start = threading.Barrier(16)

    def retry() -> None:
        start.wait()
        answers.append(letters.retry(job_id, "many"))

    threads = [threading.Thread(target=retry) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one retry placed a message, and the job runs exactly once more
    assert answers.count("waiting") == 1
    assert set(answers) <= {"waiting", "not_failed", "changed", "gone"}
    assert redis_client.llen(f"{namespace}:t_plain.fast") == 1
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, job_id) == "completed")
    assert redis_client.get(f"{namespace}:runs:race") == b"4"
