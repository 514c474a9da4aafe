"""One round trip fewer per job: jobs are claimed when their batch is fetched (grouped ones
take their slots there, parked ones never reach a thread), and a run's settle script
acknowledges its message to Dramatiq."""

from __future__ import annotations

import json
import time

import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import ACKED_IN_SETTLE, TierBroker
from tiers.fair_order import ready_count, ready_ids
from tiers.options import GROUP, JOB_ID, REDIS_MESSAGE_ID

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
    assert ready_count(redis_client, namespace, QUEUE) == 3
    assert redis_client.scard(f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}") == 0
    # And a worker then runs each exactly once
    with h.running_worker(broker):
        h.wait_until(
            lambda: all(record(broker, f"plain-{i}")["state"] == "completed" for i in range(3))
        )
    for i in range(3):
        assert record(broker, f"plain-{i}")["attempts"] == "1"
        assert int(redis_client.get(f"{namespace}:runs:{i}") or 0) == 1


def test_grouped_jobs_take_their_slot_at_fetch_and_keep_it_when_handed_back(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("g", kind="t_group"))
    consumer = broker.consume("t_group.fast", prefetch=10, timeout=100)
    message = next(consumer)
    assert message is not None
    group_key = message.options[GROUP]
    group = f"{namespace}:group:{group_key}"
    # When the batch is fetched, the grouped job is claimed too, its slot leased as a running
    # job's (30 s) and listed for this worker's lease upkeep
    assert record(broker, "group-g")["state"] == "active"
    lease = redis_client.zscore(group, "group-g")
    assert lease is not None and 25_000 < lease - time.time() * 1000 <= 30_000
    assert broker.jobs.fetched_slots() == [(group_key, "group-g")]
    assert broker.jobs.claimed_at_fetch == {message.options[REDIS_MESSAGE_ID]: "run"}
    # When it is handed back unrun, it waits again, still holding its slot with a queued
    # job's lease (an hour), and this worker no longer keeps it
    consumer.requeue([message])
    consumer.close()
    assert record(broker, "group-g")["state"] == "waiting"
    lease = redis_client.zscore(group, "group-g")
    assert lease is not None and lease - time.time() * 1000 > 3_000_000
    assert broker.jobs.fetched_slots() == []
    assert broker.jobs.claimed_at_fetch == {}
    assert ready_count(redis_client, namespace, "t_group.fast") == 1


def test_a_message_without_a_slot_in_a_full_group_is_parked_at_fetch_and_runs_once_later(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue_many([request(item, kind="t_group") for item in "ab"])
    consumer = broker.consume("t_group.fast", prefetch=10, timeout=100)
    # a's slot is gone (as when its lease was reaped while its copy waited in the queue) and
    # the group (cap 2) is full with b and another holder
    group_key = json.loads(redis_client.hvals(f"{namespace}:t_group.fast.msgs")[0])["options"][
        GROUP
    ]
    group = f"{namespace}:group:{group_key}"
    redis_client.zrem(group, "group-a")
    redis_client.zadd(group, {"holder": 1})  # a lease long past: the reaper frees it
    redis_client.zadd(f"{namespace}:__leases__", {group_key: 1})
    queue_ids = set(ready_ids(redis_client, namespace, "t_group.fast"))
    # When the batch is fetched, a is parked and acked in that step: only b reaches the worker
    message = next(consumer)
    assert message is not None and message.options[JOB_ID] == "group-b"
    assert next(consumer) is None
    assert record(broker, "group-a")["state"] == "parked"
    (parked_id,) = [i.decode() for i in redis_client.lrange(f"{group}:parked", 0, -1)]
    assert parked_id in queue_ids
    acks = f"{namespace}:__acks__.{broker.broker_id}.t_group.fast"
    assert {i.decode() for i in redis_client.smembers(acks)} == {message.options[REDIS_MESSAGE_ID]}
    assert not redis_client.hexists(f"{namespace}:t_group.fast.msgs", parked_id)
    # When the other holder's slot is reaped, a takes it, back in the queue under the same id
    assert broker.jobs.reap() == 1
    assert ready_ids(redis_client, namespace, "t_group.fast") == [parked_id]
    consumer.requeue([message])
    consumer.close()
    # And a worker runs each job exactly once
    with h.running_worker(broker):
        h.wait_until(lambda: all(h.state(broker, f"group-{i}") == "completed" for i in "ab"))
    for item in "ab":
        assert int(redis_client.get(f"{namespace}:runs:{item}") or 0) == 1
        assert record(broker, f"group-{item}")["attempts"] == "1"


def test_a_fetched_grouped_job_keeps_its_slot_while_it_waits_for_a_thread(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    # Leases of one second: a slot left without upkeep is reaped within about a second
    broker = h.make_broker(redis_url, namespace, lease_seconds=1.0)
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    try:
        slow = JobRequest(kind="t_group", organization_id=1, params={"item": "a", "sleep": 2.5})
        router.enqueue_many([slow, request("b", kind="t_group")])
        with h.running_worker(broker, threads=1):
            # One thread: a runs while b waits in the worker's prefetch, claimed at fetch
            h.wait_until(lambda: redis_client.get(f"{namespace}:runs:a") == b"1")
            group = redis_client.keys(f"{namespace}:group:*")[0]
            h.wait_until(lambda: h.state(broker, "group-b") == "active", timeout=2)
            time.sleep(1.6)
            # Then b still holds its slot after more than its lease: the worker keeps it
            assert redis_client.get(f"{namespace}:runs:b") is None
            assert redis_client.zscore(group, "group-b") is not None
            h.wait_until(lambda: h.state(broker, "group-b") == "completed")
        assert redis_client.zcard(group) == 0
        assert int(redis_client.get(f"{namespace}:runs:b") or 0) == 1
    finally:
        broker.close()


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
