"""Job identity against real Redis and real Dramatiq workers: the dedupe matrix."""

from __future__ import annotations

import threading

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker


@pytest.fixture(scope="module")
def redis_url(private_redis_url: str) -> str:
    """Tests here flush the script cache (``SCRIPT FLUSH``), which is the whole server's: they
    run on a Redis of their own."""
    return private_redis_url


def request(item: str, kind: str = "t_plain", org: int = 1, **params: object) -> JobRequest:
    return JobRequest(kind=kind, organization_id=org, params={"item": item, **params})


def runs(client: redis.Redis, namespace: str, item: str) -> int:
    return int(client.get(f"{namespace}:runs:{item}") or 0)


def state(broker: TierBroker, job_id: str) -> str | None:
    record = broker.jobs.record(job_id)
    return record["state"] if record else None


def test_waiting_id_is_deduplicated(router: Router, broker: TierBroker, namespace: str) -> None:
    first = router.enqueue(request("a"))
    second = router.enqueue(request("a"))

    assert (first.outcome, second.outcome) == ("added", "deduplicated")
    assert first.job_id == second.job_id == "plain-a"
    assert broker.client.llen(f"{namespace}:t_plain.fast") == 1


def test_delayed_id_is_deduplicated(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("d", mode="delay_long"))
    with h.running_worker(broker):
        h.wait_until(lambda: state(broker, "plain-d") == "delayed")
    assert router.enqueue(request("d", mode="delay_long")).outcome == "deduplicated"
    assert runs(redis_client, namespace, "d") == 1


def test_active_id_is_deduplicated(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("s", sleep=1.0))
    with h.running_worker(broker):
        h.wait_until(lambda: state(broker, "plain-s") == "active")
        assert router.enqueue(request("s", sleep=1.0)).outcome == "deduplicated"
        h.wait_until(lambda: state(broker, "plain-s") == "completed")
    assert runs(redis_client, namespace, "s") == 1


@pytest.mark.parametrize(("mode", "final"), [("ok", "completed"), ("unrecoverable", "failed")])
def test_finished_id_is_replaced_and_runs_again(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    mode: str,
    final: str,
) -> None:
    with h.running_worker(broker):
        router.enqueue(request("f", mode=mode))
        h.wait_until(lambda: state(broker, "plain-f") == final)
        again = router.enqueue(request("f", mode=mode))
        h.wait_until(lambda: runs(redis_client, namespace, "f") == 2)
        h.wait_until(lambda: state(broker, "plain-f") == final)

    assert again.outcome == "replaced"
    assert redis_client.pttl(broker.jobs.record_key("plain-f")) > 0  # finished records expire


def test_fifty_concurrent_enqueues_make_one_job(
    router: Router, broker: TierBroker, namespace: str
) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(10)

    def enqueue_five() -> None:
        barrier.wait()
        for _ in range(5):
            outcomes.append(router.enqueue(request("c")).outcome)

    threads = [threading.Thread(target=enqueue_five) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes).count("added") == 1
    assert outcomes.count("deduplicated") == 49
    assert broker.client.llen(f"{namespace}:t_plain.fast") == 1


def test_bulk_enqueue_reports_each_outcome_in_one_batch(router: Router, namespace: str) -> None:
    answers = router.enqueue_many([request("x"), request("y"), request("x")])

    assert [a.outcome for a in answers] == ["added", "added", "deduplicated"]
    assert [a.queue for a in answers] == ["t_plain.fast"] * 3


def test_registration_and_message_are_written_together(
    router: Router, broker: TierBroker, namespace: str
) -> None:
    """The id's record and its message are written by one script: every record points at a
    message that is on its queue, so no crash can strand an id without its message."""
    router.enqueue_many([request(str(i)) for i in range(20)])

    queued = set(broker.client.lrange(f"{namespace}:t_plain.fast", 0, -1))
    for i in range(20):
        record = broker.jobs.record(f"plain-{i}")
        assert record is not None and record["state"] == "waiting"
        assert record["cur"].encode() in queued
        assert broker.client.hexists(f"{namespace}:t_plain.fast.msgs", record["cur"])


def test_message_redelivered_after_worker_died_runs(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job a worker claimed and then died holding (never settled, never acked)
    router.enqueue(request("r"))
    queue = f"{namespace}:t_plain.fast"
    redis_id = redis_client.lpop(queue)
    from dramatiq.message import Message

    message = Message.decode(redis_client.hget(f"{queue}.msgs", redis_id))
    assert broker.jobs.claim(message, "t_plain.fast", broker.broker_id) == "run"
    assert state(broker, "plain-r") == "active"
    # When the broker hands its message back (what Dramatiq's maintenance does)
    redis_client.rpush(queue, redis_id)
    with h.running_worker(broker):
        # Then it runs: a redelivery is not deduplicated against itself
        h.wait_until(lambda: state(broker, "plain-r") == "completed")
    assert runs(redis_client, namespace, "r") == 1
    # attempts counts runs that ended: the dead worker's run never did
    assert broker.jobs.record("plain-r")["attempts"] == "1"  # type: ignore[index]


def test_stale_copy_of_a_replaced_job_is_dropped(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job that completed, and a stale copy of its message still around
    queue = f"{namespace}:t_plain.fast"
    router.enqueue(request("z"))
    old_id = redis_client.lindex(queue, 0)
    old_data = redis_client.hget(f"{queue}.msgs", old_id)
    with h.running_worker(broker):
        h.wait_until(lambda: state(broker, "plain-z") == "completed")
        # When the stale copy is delivered again
        redis_client.hset(f"{queue}.msgs", old_id, old_data)
        redis_client.rpush(queue, old_id)
        h.wait_until(lambda: redis_client.llen(queue) == 0)
        h.wait_until(lambda: not redis_client.hexists(f"{queue}.msgs", old_id))
    # Then it does not run twice
    assert runs(redis_client, namespace, "z") == 1


def _script_exists_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_script|exists", {}).get("calls", 0))


def test_a_single_enqueue_is_one_round_trip_and_survives_a_script_flush(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    # Given the identity script known to Redis
    router.enqueue(request("warm"))
    before = _script_exists_calls(redis_client)
    # When single requests are enqueued
    for i in range(20):
        assert router.enqueue(request(f"one-{i}")).outcome == "added"
    # Then none of them asked Redis whether the script exists first (one round trip each)
    assert _script_exists_calls(redis_client) == before
    # And after Redis forgets its scripts, an enqueue still lands, once
    redis_client.script_flush()
    assert router.enqueue(request("after-flush")).outcome == "added"
    assert router.enqueue(request("after-flush")).outcome == "deduplicated"
    assert state(broker, "plain-after-flush") == "waiting"
