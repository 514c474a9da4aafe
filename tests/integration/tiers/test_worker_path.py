"""A worker's round trips skip redis-py's command path as enqueues do: Dramatiq's dispatch
script (fetch, ack) and the fetch-time claim go on kept connections, never through the
pool's hand-out, and a dispatch script Redis forgot is loaded and sent again."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from dramatiq import Broker
from dramatiq.middleware import SkipMessage

from router.enqueue import Router
from router.requests import JobRequest
from tests.integration.tiers.test_script_batch import pool_hand_outs
from tests.unit.tiers.test_hooks import Acks
from tiers.broker import TierBroker
from tiers.consumer import TierConsumer


@pytest.fixture(scope="module")
def redis_url(private_redis_url: str) -> str:
    """Tests here flush the script cache (``SCRIPT FLUSH``), which is the whole server's: they
    run on a Redis of their own."""
    return private_redis_url


QUEUE = "t_plain.fast"


def enqueue(router: Router, count: int) -> None:
    router.enqueue_many([JobRequest("t_plain", 1, {"item": str(i)}) for i in range(count)])


def consumer_of(broker: TierBroker) -> TierConsumer:
    consumer = broker.consume(QUEUE, prefetch=4, timeout=10)
    assert isinstance(consumer, TierConsumer)
    return consumer


def fetch_and_ack(consumer: TierConsumer, count: int) -> list[Any]:
    handed = []
    for _ in range(count):
        message = next(consumer)
        assert message is not None
        consumer.ack(message)
        handed.append(message)
    return handed


def test_fetch_claim_and_ack_take_no_connection_from_the_pool(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enqueue(router, 8)
    consumer = consumer_of(broker)
    # Given a first batch fetched and acked (any script Redis forgot is loaded again)
    fetch_and_ack(consumer, 4)
    hand_outs = pool_hand_outs(broker.client, monkeypatch)
    # When the consumer fetches (and claims) the next batch and acks what it handed out
    handed = fetch_and_ack(consumer, 4)
    # Then every job of the batch was claimed at fetch and each ack landed
    assert all(
        redis_client.hget(f"{namespace}:job:{m.options['st_job']}", "state") == b"active"
        for m in handed
    )
    assert redis_client.scard(f"{namespace}:__acks__.{broker.broker_id}.{QUEUE}") == 0
    # And not one connection was handed out by the pool
    assert hand_outs[0] == 0
    consumer.close()


def test_a_forgotten_dispatch_script_is_loaded_and_the_fetch_sent_again(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    enqueue(router, 8)
    consumer = consumer_of(broker)
    for _ in range(4):
        message = next(consumer)
        assert message is not None
        consumer.ack(message)
    # Given Redis forgot its scripts (a restart or a flush)
    redis_client.script_flush()
    # When the consumer fetches again, Then the fetch is served, and so is the claim
    message = next(consumer)
    assert message is not None
    assert broker.jobs.claimed_at_fetch.get(message.options["redis_message_id"]) == "run"
    consumer.close()


class Calls(Acks):
    def before_process_message(self, broker: Broker, message: Any) -> None:
        raise SkipMessage(self.name)


def test_signals_reach_the_hooking_middleware_as_dramatiq_orders_them(
    broker: TierBroker,
) -> None:
    seen: list[str] = []
    count = len(broker.middleware)
    broker.add_middleware(Calls("one", seen))
    broker.add_middleware(Calls("two", seen))
    # When the ack signals are emitted
    broker.emit_before("ack", None)
    broker.emit_after("ack", None)
    # Then before goes down the stack and after comes back up it
    assert seen == ["before one", "before two", "after two", "after one"]
    # And a middleware's SkipMessage still stops the message
    with pytest.raises(SkipMessage):
        broker.emit_before("process_message", None)
    del broker.middleware[count:]


class Runs(Acks):
    """Records what a run's signals hand it; ``fail`` makes its hooks raise."""

    def __init__(self, name: str, seen: list[str], fail: type[Exception] | None = None):
        super().__init__(name, seen)
        self.fail = fail

    def after_process_message(
        self, broker: Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        self.seen.append(f"{self.name} {message} result={result} exception={exception}")
        if self.fail:
            raise self.fail(self.name)

    def before_worker_boot(self, broker: Broker, worker: Any, *extra: Any) -> None:
        self.seen.append(f"{self.name} boot {worker} {extra}")


def test_each_form_of_a_signal_reaches_every_hook_and_a_failing_hook_stops_none(
    broker: TierBroker, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    count = len(broker.middleware)
    broker.add_middleware(Runs("one", seen))
    broker.add_middleware(Runs("two", seen, fail=SkipMessage))
    broker.add_middleware(Runs("three", seen, fail=RuntimeError))
    try:
        # A run that returned, one that raised, and a signal of two arguments
        broker.emit_after("process_message", "m1", result=7)
        broker.emit_after("process_message", "m2", exception="boom")
        broker.emit_before("worker_boot", "w", "x")
    finally:
        del broker.middleware[count:]
    # Then every hook saw its arguments, in reverse order after and in order before, and
    # the failing ones (a middleware error after a run included) were logged, not raised
    assert seen == [
        "three m1 result=7 exception=None",
        "two m1 result=7 exception=None",
        "one m1 result=7 exception=None",
        "three m2 result=None exception=boom",
        "two m2 result=None exception=boom",
        "one m2 result=None exception=boom",
        "one boot w ('x',)",
        "two boot w ('x',)",
        "three boot w ('x',)",
    ]
    ours = [m for r in caplog.records if "failure in" in (m := r.getMessage()) and "Runs" in m]
    assert len(ours) == 4 and all("after_process_message of" in f for f in ours), ours
