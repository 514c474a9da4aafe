"""A freed group slot passes to the oldest parked message by moving an id, not the message:
a parked message keeps its data in its queue's hash and its parked entry is its route
(redis id, queue, job id). Entries parked by an earlier version (the redis id alone, the
message in the group's own hash) are still released. A claim at a run's start parks in
place too, taking the delivery out of the worker's ack set, so the ack that follows cannot
drop a copy a release queued meanwhile. And the lease index (``__leases__``) keeps, for
every group holding a job, an entry at or below its earliest deadline, which lets a release
leave it alone (tiers/lua/_prelude.lua)."""

from __future__ import annotations

import time

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.fetch_claims import QUEUED_LEASE_MS

QUEUE = "t_serial.fast"
GROUP = f"{QUEUE}|1"


def serial(item: str) -> JobRequest:
    return JobRequest(kind="t_serial", organization_id=1, params={"item": item})


def parked_keys(namespace: str) -> tuple[str, str]:
    parked = f"{namespace}:group:{GROUP}:parked"
    return parked, f"{parked}.msgs"


def leases_cover_groups(client: redis.Redis, namespace: str) -> None:
    """Every group holding a job has a lease entry at or below its earliest deadline."""
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


def test_a_release_moves_the_parked_id_by_its_route_and_leaves_nothing_behind(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given three jobs of a group capped at 1: a holds the slot, b and c are parked in place
    router.enqueue_many([serial("a"), serial("b"), serial("c")])
    parked, stored = parked_keys(namespace)
    a_id, b_id, c_id = (broker.jobs.record(f"serial-{i}")["cur"] for i in "abc")  # type: ignore[index]
    assert redis_client.lrange(parked, 0, -1) == [
        f"{b_id}\n{QUEUE}\nserial-b".encode(),
        f"{c_id}\n{QUEUE}\nserial-c".encode(),
    ]
    assert redis_client.lrange(f"{namespace}:{QUEUE}", 0, -1) == [a_id.encode()]
    assert redis_client.hlen(f"{namespace}:{QUEUE}.msgs") == 3
    assert not redis_client.exists(stored)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When each run is settled, the slot passes down the line
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-b") == "waiting"
    assert redis_client.zrange(f"{namespace}:group:{GROUP}", 0, -1) == [b"serial-b"]
    assert redis_client.lrange(f"{namespace}:{QUEUE}", 0, -1) == [b_id.encode()]
    assert run_one(broker, consumer) == "released"
    assert run_one(broker, consumer) == "ok"
    consumer.close()  # type: ignore[attr-defined]
    # Then every job ran once, and no parked entry or message remains
    assert [h.state(broker, f"serial-{i}") for i in "abc"] == ["completed"] * 3
    assert not redis_client.exists(parked, stored, f"{namespace}:{QUEUE}.msgs")


def park_as_before(client: redis.Redis, namespace: str, redis_id: str) -> None:
    """Turn the first parked entry (redis_id's) into one an earlier version parked: the
    redis id alone, the message in the group's own hash."""
    parked, stored = parked_keys(namespace)
    data = client.hget(f"{namespace}:{QUEUE}.msgs", redis_id)
    assert data is not None
    client.hdel(f"{namespace}:{QUEUE}.msgs", redis_id)
    client.hset(stored, redis_id, data)
    client.lset(parked, 0, redis_id)


def test_a_message_an_earlier_version_parked_is_released_from_the_groups_hash(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given b parked by an earlier version: its message in the group's own hash
    router.enqueue_many([serial("a"), serial("b")])
    _, stored = parked_keys(namespace)
    b_id = broker.jobs.record("serial-b")["cur"]  # type: ignore[index]
    park_as_before(redis_client, namespace, b_id)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When a's slot frees, b takes it and is queued, then runs
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-b") == "waiting"
    assert redis_client.zscore(f"{namespace}:group:{GROUP}", "serial-b") is not None
    assert not redis_client.exists(stored)
    assert run_one(broker, consumer) == "ok"
    consumer.close()  # type: ignore[attr-defined]
    assert h.state(broker, "serial-b") == "completed"


@pytest.mark.parametrize("before", [False, True], ids=["parked in place", "parked before"])
def test_a_parked_message_whose_data_is_gone_passes_the_slot_on(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    before: bool,
) -> None:
    # Given b and c parked behind a, and b's message gone
    router.enqueue_many([serial("a"), serial("b"), serial("c")])
    _, stored = parked_keys(namespace)
    b_id = broker.jobs.record("serial-b")["cur"]  # type: ignore[index]
    if before:
        park_as_before(redis_client, namespace, b_id)
        redis_client.hdel(stored, b_id)
    else:
        redis_client.hdel(f"{namespace}:{QUEUE}.msgs", b_id)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When a's slot frees, it goes to c
    assert run_one(broker, consumer) == "released"
    assert h.state(broker, "serial-c") == "waiting"
    assert h.state(broker, "serial-b") == "parked"
    consumer.close()  # type: ignore[attr-defined]


def test_the_lease_index_covers_every_group_through_claims_releases_and_reaps(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    group = f"{namespace}:group:{GROUP}"
    router.enqueue_many([serial(str(i)) for i in range(4)])
    leases_cover_groups(redis_client, namespace)
    # A held slot's claim at fetch moves its lease from the queued one to the run lease
    before = int(time.time() * 1000) - 1
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    message = next(consumer)
    assert message is not None
    deadline = redis_client.zscore(group, "serial-0")
    assert deadline is not None
    assert before + broker.jobs.lease_ms <= deadline < before + QUEUED_LEASE_MS / 2
    leases_cover_groups(redis_client, namespace)
    # A release admits the next job with a queued lease and leaves the index entry alone
    assert broker.jobs.settle(message, state="completed", retention_seconds=60) == "released"
    leases_cover_groups(redis_client, namespace)
    assert redis_client.zscore(group, "serial-1") >= before + QUEUED_LEASE_MS  # type: ignore[operator]
    # A reap of an expired slot (its worker died) passes it on and resets the entry
    message = next(consumer)
    assert message is not None
    redis_client.zadd(group, {"serial-1": 1})
    redis_client.zadd(f"{namespace}:__leases__", {GROUP: 1})
    assert broker.jobs.reap() == 1
    assert h.state(broker, "serial-2") == "waiting"
    leases_cover_groups(redis_client, namespace)
    # And once the group is empty, the entry goes with the next reap
    consumer.close()  # type: ignore[attr-defined]
    for job in ("serial-2", "serial-3"):
        while redis_client.zscore(group, job) is not None:
            redis_client.zadd(group, {job: 1})
            redis_client.zadd(f"{namespace}:__leases__", {GROUP: 1})
            broker.jobs.reap()
    assert not redis_client.exists(group)
    assert redis_client.zscore(f"{namespace}:__leases__", GROUP) is None


def test_a_job_a_claim_parks_at_its_start_survives_the_ack_of_its_delivery(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    from dramatiq.message import Message

    group, queue = f"{namespace}:group:{GROUP}", f"{namespace}:{QUEUE}"
    router.enqueue_many([serial("a"), serial("b")])
    a_id = broker.jobs.record("serial-a")["cur"]  # type: ignore[index]
    # Given a's slot gone (reaped) and the group full with another holder, and a delivered
    # to this worker (Dramatiq's fetch, without the fetch-time claim)
    redis_client.zrem(group, "serial-a")
    redis_client.zadd(group, {"holder": 1})
    redis_client.zadd(f"{namespace}:__leases__", {GROUP: 1})
    acks = f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}"
    assert redis_client.lpop(queue) == a_id.encode()
    redis_client.sadd(acks, a_id)
    delivered = Message.decode(redis_client.hget(f"{queue}.msgs", a_id))
    # When the worker claims a at its start, a is parked in place, no longer in the ack set
    assert broker.jobs.claim(delivered, QUEUE, broker.broker_id) == "parked"
    assert redis_client.lrange(f"{group}:parked", -1, -1) == [f"{a_id}\n{QUEUE}\nserial-a".encode()]
    assert not redis_client.sismember(acks, a_id)
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
