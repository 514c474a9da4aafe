"""Nothing lost, nothing run twice, under faults: a Redis restart under a live worker,
malformed messages, a crash between two writes, bare messages, an unreadable kill switch and
a database outage. Real Redis (a durable one of the test's own where Redis restarts) and
real worker processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from dramatiq import Actor
from dramatiq.message import Message

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from services.app.embedded import EmbeddedService, start_embedded_redis
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.fair_order import ready_count
from tiers.options import ETA, JOB_ID, REDIS_MESSAGE_ID

QUEUE = "t_plain.fast"


def make_router(broker: TierBroker) -> Router:
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    return Router(registry, broker)


def request(item: str, **params: object) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item, **params})


def runs(client: redis.Redis, namespace: str, item: str) -> int:
    return int(client.get(f"{namespace}:runs:{item}") or 0)


def all_in(broker: TierBroker, items: list[str], state: str) -> bool:
    return all(h.state(broker, f"plain-{item}") == state for item in items)


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[list[EmbeddedService]]:
    """The embedded Redis (append-only file), in a list so a test can swap in its restart.

    On a free port, not the default 16379, which another test process may be taking or
    may take while this one's Redis is down."""
    servers = [start_embedded_redis(tmp_path / "redis", port=0)]
    yield servers
    servers[-1].stop()


def test_delayed_jobs_held_by_a_live_worker_run_after_redis_restarts(
    durable_redis: list[EmbeddedService], tmp_path: Path
) -> None:
    namespace = "blip"
    url = durable_redis[0].url
    broker = h.make_broker(url, namespace)
    client = redis.Redis.from_url(url)
    items = [f"d{i}" for i in range(22)]
    make_router(broker).enqueue_many([request(i, mode="delay", times=1, delay=4) for i in items])
    held = f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}.DQ"
    with h.running_worker(broker, threads=4):
        # Given 22 jobs delayed 4 s, every one fetched into the worker's delay queue
        h.wait_until(lambda: all_in(broker, items, "delayed") and client.scard(held) == 22)
        # When Redis is killed and comes back 1.5 s later, the worker still running
        durable_redis[0].crash()
        time.sleep(1.5)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        durable_redis.append(start_embedded_redis(tmp_path / "redis", port=port))
        assert durable_redis[-1].url == url
        # Then every job runs once more and completes
        h.wait_until(lambda: all_in(broker, items, "completed"), timeout=30)
    assert [runs(client, namespace, i) for i in items] == [2] * 22
    assert client.scard(held) == 0
    broker.close()


def test_messages_whose_fetch_reply_was_lost_are_handed_back(
    broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given messages a fetch moved to this worker's unacked set whose reply never arrived
    make_router(broker).enqueue_many([request(f"l{i}") for i in range(5)])
    broker._dispatch("fetch")(QUEUE, 5)  # the reply is dropped, as on a connection error
    assert ready_count(redis_client, namespace, QUEUE) == 0
    # When the consumer reconnects and recovers
    assert broker.recover_unheld(QUEUE) == 5
    # Then they are back in the queue and run once each
    with h.running_worker(broker):
        h.wait_until(lambda: all_in(broker, [f"l{i}" for i in range(5)], "completed"))
    assert [runs(redis_client, namespace, f"l{i}") for i in range(5)] == [1] * 5


def test_adjacent_malformed_messages_are_dead_lettered_and_good_jobs_still_run(
    broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    queue = f"{namespace}:{QUEUE}"
    # Given, ahead of 50 good jobs: two undecodable messages, one without a job id and one for
    # an actor no worker has (its job id registered)
    for redis_id, data in (("bad-1", b"\x00\xffnot json"), ("bad-2", b'{"queue_name": "t_pl')):
        redis_client.hset(f"{queue}.msgs", redis_id, data)
        redis_client.rpush(queue, redis_id)
    bare = Message(queue_name=QUEUE, actor_name="t_plain", args=(), kwargs={}, options={})
    bare = bare.copy(options={REDIS_MESSAGE_ID: "bare-1"})
    redis_client.hset(f"{queue}.msgs", "bare-1", bare.encode())
    redis_client.rpush(queue, "bare-1")

    def ghost_message() -> Message[object]:
        return TierBroker.prepare(
            Message(
                queue_name=QUEUE, actor_name="no_such_actor", args=(), kwargs={}, options={}
            ).copy(options={JOB_ID: "ghost-1"})
        )

    ghost = ghost_message()
    assert broker.jobs.enqueue_many([ghost])[0].outcome == "added"
    items = [f"g{i}" for i in range(50)]
    make_router(broker).enqueue_many([request(i) for i in items])
    # When a worker consumes the queue
    with h.running_worker(broker, threads=2):
        # Then every good job runs
        h.wait_until(lambda: all_in(broker, items, "completed"))
    # And the four bad messages are dead-lettered, nothing left unacked or queued
    assert redis_client.zcard(f"{queue}.XQ") == 4
    assert redis_client.llen(queue) == 0
    assert redis_client.hlen(f"{queue}.msgs") == 0
    # And the unknown actor's job failed, so its id can be enqueued again
    ghost_record = broker.jobs.record("ghost-1")
    assert ghost_record is not None and ghost_record["state"] == "failed"
    assert "no_such_actor" in ghost_record["last_error"]
    assert broker.jobs.enqueue_many([ghost_message()])[0].outcome == "replaced"


def test_a_delayed_copy_moved_again_after_the_job_completed_does_not_revive_it(
    broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job delayed once, whose delayed copy we keep as a redelivery would see it
    make_router(broker).enqueue(request("m", mode="delay", times=1, delay=1.0))
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-m") == "delayed")
        delayed_raw = list(redis_client.hvals(f"{namespace}:{QUEUE}.DQ.msgs"))
        h.wait_until(lambda: h.state(broker, "plain-m") == "completed")
    assert len(delayed_raw) == 1
    # When that copy is moved to the queue again (a worker died between Dramatiq's move and
    # its ack, and the copy was redelivered)
    delayed = Message.decode(delayed_raw[0])
    moved = delayed.copy(queue_name=QUEUE)
    moved.options.pop(ETA)
    broker.enqueue(moved)
    # Then the completed record stands and nothing is queued
    assert h.state(broker, "plain-m") == "completed"
    assert ready_count(redis_client, namespace, QUEUE) == 0
    assert runs(redis_client, namespace, "m") == 2


@pytest.mark.parametrize("fault", ["promote.before", "promote.after"])
def test_a_worker_killed_around_moving_a_delayed_job_loses_nothing_and_repeats_nothing(
    redis_url: str, redis_client: redis.Redis, namespace: str, fault: str
) -> None:
    broker = h.make_broker(redis_url, namespace, heartbeat_timeout_ms=1000)
    make_router(broker).enqueue(request("k", mode="delay", times=1, delay=0.5))
    # Given a worker process that dies just before (or just after) moving the due job
    dying = h.start_worker_process(redis_url, namespace, fault=fault, heartbeat_timeout_ms=1000)
    dying.join(timeout=30)
    assert dying.exitcode == -9
    # When another worker takes over (the dead worker's messages return after its heartbeat)
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-k") == "completed", timeout=30)
        time.sleep(1.5)  # past another heartbeat timeout: nothing else comes back
    # Then the job ran once delayed and once to completion: no more
    assert runs(redis_client, namespace, "k") == 2
    assert ready_count(redis_client, namespace, QUEUE) == 0
    broker.close()


def test_a_message_without_a_job_id_is_refused_at_the_broker(broker: TierBroker) -> None:
    actor = Actor(
        lambda: None, broker=broker, actor_name="bare", queue_name=QUEUE, priority=0, options={}
    )
    with pytest.raises(ValueError, match="no job id"):
        actor.send()


def test_an_unreadable_kill_switch_delays_without_spending_an_attempt(
    redis_url: str, namespace: str
) -> None:
    def unreadable(flag: str) -> bool:
        raise ConnectionError("flipper table unreachable")

    broker = h.make_broker(redis_url, namespace, is_enabled=unreadable)
    make_router(broker).enqueue(JobRequest("t_paused", 1, {"item": "u"}))
    with h.running_worker(broker):
        h.wait_until(lambda: (broker.jobs.record("paused-u") or {}).get("last_delay", "") != "")
    record = broker.jobs.record("paused-u")
    assert record is not None
    assert (record["state"], record["failures"]) == ("delayed", "0")
    assert record["last_delay"].startswith("kill switch unreadable")
    broker.close()


def test_a_database_outage_in_a_handler_delays_without_spending_an_attempt(
    broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    make_router(broker).enqueue(request("o", mode="outage", times=1))
    with h.running_worker(broker):
        h.wait_until(lambda: runs(redis_client, namespace, "o") == 1)
        h.wait_until(lambda: (broker.jobs.record("plain-o") or {}).get("last_delay", "") != "")
    record = broker.jobs.record("plain-o")
    assert record is not None
    assert (record["state"], record["failures"]) == ("delayed", "0")
    assert record["last_delay"].startswith("outage")


def test_only_lost_connections_count_as_outages(database_url: str) -> None:
    import psycopg
    import sqlalchemy
    from sqlalchemy import text

    from shared.errors import Retryable
    from shared.outages import is_infrastructure_outage

    # A refused connection, raw and as SQLAlchemy wraps it, and raised from a Retryable
    with pytest.raises(psycopg.OperationalError) as raw:
        psycopg.connect("postgresql://127.0.0.1:1/none", connect_timeout=2)
    engine = sqlalchemy.create_engine("postgresql+psycopg://127.0.0.1:1/none")
    with pytest.raises(sqlalchemy.exc.OperationalError) as wrapped:
        engine.connect()
    try:
        raise Retryable("could not read") from wrapped.value
    except Retryable as chained:
        assert is_infrastructure_outage(chained)
    assert is_infrastructure_outage(raw.value)
    assert is_infrastructure_outage(wrapped.value)
    # A query's own failure (division by zero, a statement timeout) is not an outage
    live = sqlalchemy.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    with live.connect() as connection:
        with pytest.raises(sqlalchemy.exc.DataError) as division:
            connection.execute(text("SELECT 1 / 0"))
        connection.rollback()
        connection.execute(text("SET statement_timeout = 10"))
        with pytest.raises(sqlalchemy.exc.OperationalError) as timeout:
            connection.execute(text("SELECT pg_sleep(1)"))
    live.dispose()
    assert not is_infrastructure_outage(division.value)
    assert not is_infrastructure_outage(timeout.value)
