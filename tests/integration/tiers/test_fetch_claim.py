"""One round trip fewer per job: jobs without a group are claimed when their batch is fetched,
and a run's settle script acknowledges its message to Dramatiq."""

from __future__ import annotations

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import ACKED_IN_SETTLE, TierBroker

QUEUE = "t_plain.fast"


def request(item: str, kind: str = "t_plain") -> JobRequest:
    return JobRequest(kind=kind, organization_id=1, params={"item": item})


def record(broker: TierBroker, job_id: str) -> dict[str, str]:
    found = broker.jobs.record(job_id)
    assert found is not None
    return found


def test_fetched_jobs_without_a_group_are_claimed_and_handed_back_unclaimed(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue_many([request(str(i)) for i in range(3)] + [request("g", kind="t_group")])
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When a consumer fetches the batch, the jobs are claimed in that same step (a fetch is
    # not an attempt: attempts counts runs that ended)
    first = next(consumer)
    assert first is not None
    for i in range(3):
        assert (
            record(broker, f"plain-{i}")["state"],
            record(broker, f"plain-{i}")["attempts"],
        ) == (
            "active",
            "0",
        )
    assert len(broker.jobs.claimed_at_fetch) == 3
    # When the worker shuts down, the handed-out message comes back through requeue and the
    # fetched-but-not-handed-out ones through close: unclaimed, then back in the queue
    consumer.requeue([first])
    consumer.close()
    for i in range(3):
        assert (
            record(broker, f"plain-{i}")["state"],
            record(broker, f"plain-{i}")["attempts"],
        ) == (
            "waiting",
            "0",
        )
    assert broker.jobs.claimed_at_fetch == {}
    assert redis_client.llen(f"{namespace}:{QUEUE}") == 3
    assert redis_client.scard(f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}") == 0
    # And a worker then runs each exactly once
    with h.running_worker(broker):
        h.wait_until(
            lambda: all(record(broker, f"plain-{i}")["state"] == "completed" for i in range(3))
        )
    for i in range(3):
        assert record(broker, f"plain-{i}")["attempts"] == "1"
        assert int(redis_client.get(f"{namespace}:runs:{i}") or 0) == 1


def test_grouped_jobs_are_claimed_when_they_start(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("g", kind="t_group"))
    consumer = broker.consume("t_group.fast", prefetch=10, timeout=100)
    assert next(consumer) is not None
    assert record(broker, "group-g")["state"] == "waiting"
    assert broker.jobs.claimed_at_fetch == {}
    consumer.close()


def test_settle_acknowledges_the_message_and_the_consumer_skips_its_ack(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("a"))
    with h.running_worker(broker):
        h.wait_until(lambda: record(broker, "plain-a")["state"] == "completed")
        # Nothing left unacknowledged: the settle script removed it from the ack set and the hash
        h.wait_until(lambda: redis_client.hlen(f"{namespace}:{QUEUE}.msgs") == 0)
    acks = redis_client.keys(f"{namespace}:__acks__.*")
    assert all(redis_client.scard(key) == 0 for key in acks)

    consumer = broker.consume(QUEUE, prefetch=1, timeout=100)
    router.enqueue(request("b"))
    message = next(consumer)
    assert message is not None

    def no_round_trip(*_args: object) -> None:
        raise AssertionError("acked twice")

    setattr(message, ACKED_IN_SETTLE, True)
    broker.do_ack = no_round_trip  # type: ignore[method-assign]
    consumer.ack(message)
    assert consumer.outstanding_message_count == 0
