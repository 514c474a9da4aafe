"""A main queue's batch is fetched and claimed in one round trip (fetch_claim.lua); what the
script cannot claim (not a whole message, an actor this worker does not run, no job id) is
left unclaimed and screened by the worker as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.options import GROUP, JOB_ID, REDIS_MESSAGE_ID

QUEUE = "t_group.fast"


def grouped(item: str) -> JobRequest:
    return JobRequest(kind="t_group", organization_id=1, params={"item": item})


@pytest.fixture
def round_trips(broker: TierBroker) -> Iterator[list[str]]:
    """The script of every round trip of the fetch path (claims and Dramatiq's dispatch)."""
    sent: list[str] = []
    names = {script.sha: name for name, script in broker.jobs._scripts.items()}
    names[broker.scripts["dispatch"].sha] = "dispatch"

    def spy(sender: Any) -> Any:
        send = sender.send

        def recording(script: Any, key: str, calls: Any) -> Any:
            sent.append(names.get(script.sha, "?"))
            return send(script, key, calls)

        return recording

    broker.jobs._fetches.send = spy(broker.jobs._fetches)  # type: ignore[method-assign]
    broker._dispatches.send = spy(broker._dispatches)  # type: ignore[method-assign]
    yield sent


def inject(client: redis.Redis, namespace: str, redis_id: str, data: bytes) -> None:
    """A message put in the queue by something other than the router."""
    client.hset(f"{namespace}:{QUEUE}.msgs", redis_id, data)
    client.rpush(f"{namespace}:{QUEUE}", redis_id)


def queued_message(client: redis.Redis, namespace: str) -> dict[str, Any]:
    (data,) = client.hvals(f"{namespace}:{QUEUE}.msgs")
    message: dict[str, Any] = json.loads(data)
    return message


def test_a_batch_is_fetched_and_claimed_in_one_round_trip(
    router: Router, broker: TierBroker, round_trips: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    router.enqueue_many([grouped(item) for item in "abc"])  # cap 2: c is parked
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    first = next(consumer)
    assert first is not None
    # One round trip fetched the batch and claimed it: a and b started, their slots held
    assert round_trips == ["fetch_claim"]
    assert [h.state(broker, f"group-{i}") for i in "abc"] == ["active", "active", "parked"]
    assert set(broker.jobs.claimed_at_fetch.values()) == {"run"}
    assert sorted(job for _, job in broker.jobs.fetched_slots()) == ["group-a", "group-b"]
    second = next(consumer)
    assert second is not None and next(consumer) is None
    # Handed back unrun, the claims are undone as before
    consumer.requeue([first, second])
    consumer.close()
    assert [h.state(broker, f"group-{i}") for i in "ab"] == ["waiting", "waiting"]
    assert broker.jobs.claimed_at_fetch == {}
    # And a worker runs each job once
    with h.running_worker(broker):
        h.wait_until(lambda: all(h.state(broker, f"group-{i}") == "completed" for i in "abc"))
    for item in "abc":
        record = broker.jobs.record(f"group-{item}")
        assert record is not None and record["attempts"] == "1"


def test_what_the_script_cannot_claim_is_screened_by_the_worker_and_takes_no_slot(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    round_trips: list[str],
) -> None:
    router.enqueue(grouped("good"))
    good = queued_message(redis_client, namespace)
    group = f"{namespace}:group:{good['options'][GROUP]}"

    def variant(redis_id: str, job: str, **changes: Any) -> bytes:
        message = {**good, "options": {**good["options"], REDIS_MESSAGE_ID: redis_id}}
        message["options"][JOB_ID] = job
        message.update(changes)
        return json.dumps(message).encode()

    # Given, beside a job the router enqueued: undecodable data, a message of an actor this
    # worker does not run, and one with a field Dramatiq's message does not have (each a
    # grouped job of the same organization)
    inject(redis_client, namespace, "bad-json", b'{"actor_name": "t_group", "args": [')
    inject(redis_client, namespace, "bad-actor", variant("bad-actor", "ghost-1", actor_name="x"))
    inject(redis_client, namespace, "bad-field", variant("bad-field", "ghost-2", extra=1))
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    # When the batch is fetched, only the router's job reaches the worker, claimed
    message = next(consumer)
    assert message is not None and message.options[JOB_ID] == "group-good"
    assert next(consumer) is None
    assert h.state(broker, "group-good") == "active"
    assert round_trips[0] == "fetch_claim"
    # Then the others were dead-lettered, their jobs failed, and none took a group slot
    dead = {i.decode() for i in redis_client.zrange(f"{namespace}:{QUEUE[:-5]}.fast.XQ", 0, -1)}
    assert dead == {"bad-json", "bad-actor", "bad-field"}
    assert [h.state(broker, job) for job in ("ghost-1", "ghost-2")] == [None, None]
    assert {i.decode() for i in redis_client.zrange(group, 0, -1)} == {"group-good"}
    consumer.requeue([message])
    consumer.close()
