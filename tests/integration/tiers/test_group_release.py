"""A freed group slot passes to the oldest parked message, and a job parked by a claim at a
run's start outlives the ack of that delivery. The lease index (``__leases__``) keeps, for
every group holding a job, an entry at or below its earliest deadline, which lets a release
leave it alone; a claim moves a held slot's lease (tiers/lua/_prelude.lua, claim.lua)."""

from __future__ import annotations

import json
import time

import redis
from dramatiq.message import Message

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.fair_order import ready_ids
from tiers.fetch_claims import QUEUED_LEASE_MS

QUEUE = "t_serial.fast"
GROUP = f"{QUEUE}|1"


def serial(item: str) -> JobRequest:
    return JobRequest(kind="t_serial", organization_id=1, params={"item": item})


def leases_cover_the_group(client: redis.Redis, namespace: str) -> None:
    """A group holding a job has a lease entry at or below its earliest deadline."""
    group = client.zrange(f"{namespace}:group:{GROUP}", 0, 0, withscores=True)
    if not group:
        return
    entry = client.zscore(f"{namespace}:__leases__", GROUP)
    assert entry is not None, "a group holding a job has no entry in the lease index"
    assert entry <= group[0][1]


def run_one(broker: TierBroker, consumer: object) -> str:
    """Fetch the next message (claimed at fetch) and settle it, acking its delivery; the
    settle's verdict."""
    message = next(consumer)  # type: ignore[call-overload]
    assert message is not None
    return broker.jobs.settle(
        message, state="completed", retention_seconds=60, ack=(QUEUE, broker.broker_id)
    )


def test_a_release_passes_the_slot_down_the_line_and_leaves_nothing_behind(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given three jobs of a group capped at 1: a holds the slot, b and c are parked
    router.enqueue_many([serial("a"), serial("b"), serial("c")])
    parked = f"{namespace}:group:{GROUP}:parked"
    b_id = broker.jobs.record("serial-b")["cur"]  # type: ignore[index]
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When each run is settled, the slot passes to the oldest parked job, queued
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-b") == "waiting"
    assert redis_client.zrange(f"{namespace}:group:{GROUP}", 0, -1) == [b"serial-b"]
    assert ready_ids(redis_client, namespace, QUEUE) == [b_id]
    assert run_one(broker, consumer) == "released"
    assert run_one(broker, consumer) == "ok"
    consumer.close()  # type: ignore[attr-defined]
    # Then every job ran once, and no parked entry or message remains
    assert [h.state(broker, f"serial-{i}") for i in "abc"] == ["completed"] * 3
    assert not redis_client.exists(parked, f"{parked}.msgs", f"{namespace}:{QUEUE}.msgs")


def test_a_release_names_the_parked_job_by_its_options_whatever_its_arguments_say(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given b and c parked behind a, b's message carrying c's job id and another queue's
    # name as keyword arguments (keys the release reads from the message's options and top)
    router.enqueue_many([serial("a"), serial("b"), serial("c")])
    b_id = broker.jobs.record("serial-b")["cur"]  # type: ignore[index]
    parked_msgs = f"{namespace}:group:{GROUP}:parked.msgs"
    data = json.loads(redis_client.hget(parked_msgs, b_id))  # type: ignore[arg-type]
    data["kwargs"] = {"st_job": "serial-c", "queue_name": "elsewhere.fast", **data["kwargs"]}
    redis_client.hset(parked_msgs, b_id, json.dumps(data, separators=(",", ":")))
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When a's slot frees, it goes to b, in b's own queue
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-b") == "waiting"
    assert h.state(broker, "serial-c") == "parked"
    assert redis_client.zrange(f"{namespace}:group:{GROUP}", 0, -1) == [b"serial-b"]
    assert ready_ids(redis_client, namespace, QUEUE) == [b_id]
    consumer.close()  # type: ignore[attr-defined]


def test_a_parked_message_whose_data_is_gone_passes_the_slot_on(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given b and c parked behind a, and b's stored message gone
    router.enqueue_many([serial("a"), serial("b"), serial("c")])
    b_id = broker.jobs.record("serial-b")["cur"]  # type: ignore[index]
    redis_client.hdel(f"{namespace}:group:{GROUP}:parked.msgs", b_id)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When a's slot frees, it goes to c
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-c") == "waiting"
    assert h.state(broker, "serial-b") == "parked"
    consumer.close()  # type: ignore[attr-defined]


def test_the_lease_index_covers_every_group_through_claims_releases_and_reaps(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    group, index = f"{namespace}:group:{GROUP}", f"{namespace}:__leases__"
    router.enqueue_many([serial(str(i)) for i in range(4)])
    leases_cover_the_group(redis_client, namespace)
    # A held slot's claim at fetch moves its lease from the queued one to the run lease
    before = int(time.time() * 1000) - 1
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    message = next(consumer)
    assert message is not None
    deadline = redis_client.zscore(group, "serial-0")
    assert deadline is not None
    assert before + broker.jobs.lease_ms <= deadline < before + QUEUED_LEASE_MS / 2
    leases_cover_the_group(redis_client, namespace)
    # A release admits the next job with a queued lease; the index entry stays below it
    assert broker.jobs.settle(message, state="completed", retention_seconds=60) == "released"
    leases_cover_the_group(redis_client, namespace)
    assert redis_client.zscore(group, "serial-1") >= before + QUEUED_LEASE_MS  # type: ignore[operator]
    # A reap of an expired slot (its worker died) passes it on and resets the entry
    message = next(consumer)
    assert message is not None
    redis_client.zadd(group, {"serial-1": 1})
    redis_client.zadd(index, {GROUP: 1})
    assert broker.jobs.reap() == 1
    assert h.state(broker, "serial-2") == "waiting"
    leases_cover_the_group(redis_client, namespace)
    consumer.close()  # type: ignore[attr-defined]
    # And once the group is empty, the entry goes with the next reap
    for job in ("serial-2", "serial-3"):
        while redis_client.zscore(group, job) is not None:
            redis_client.zadd(group, {job: 1})
            redis_client.zadd(index, {GROUP: 1})
            broker.jobs.reap()
    assert not redis_client.exists(group)
    assert redis_client.zscore(index, GROUP) is None


def test_a_job_a_claim_parks_at_its_start_survives_the_ack_of_its_delivery(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    group, queue = f"{namespace}:group:{GROUP}", f"{namespace}:{QUEUE}"
    router.enqueue_many([serial("a"), serial("b")])
    a_id = broker.jobs.record("serial-a")["cur"]  # type: ignore[index]
    # Given a's slot gone (reaped) and the group full with another holder, and a delivered
    # to this worker (Dramatiq's fetch, without the fetch-time claim)
    redis_client.zrem(group, "serial-a")
    redis_client.zadd(group, {"holder": 1})
    redis_client.zadd(f"{namespace}:__leases__", {GROUP: 1})
    acks = f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}"
    assert redis_client.zrem(f"{queue}.fq", a_id) == 1
    redis_client.sadd(acks, a_id)
    delivered = Message.decode(redis_client.hget(f"{queue}.msgs", a_id))
    # When the worker claims a at its start, a is parked and its delivery acked
    assert broker.jobs.claim(delivered, QUEUE, broker.broker_id) == "parked"
    assert redis_client.lrange(f"{group}:parked", -1, -1) == [a_id.encode()]
    assert not redis_client.sismember(acks, a_id)
    assert not redis_client.hexists(f"{queue}.msgs", a_id)
    # And b, then a, get the slot before the worker's ack of that delivery reaches Redis
    assert broker.jobs.reap() == 1
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-a") == "waiting"
    broker.do_ack(QUEUE, a_id)  # type: ignore[attr-defined]
    # Then the ack dropped nothing: a runs, once
    assert redis_client.hexists(f"{queue}.msgs", a_id)
    assert run_one(broker, consumer) == "ok"
    consumer.close()  # type: ignore[attr-defined]
    assert [h.state(broker, f"serial-{i}") for i in "ab"] == ["completed"] * 2
