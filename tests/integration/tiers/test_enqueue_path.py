"""The enqueue's short path keeps what the long one gave: a middleware's enqueue hooks see
every enqueue (also one added after the first enqueue), the message stored is the one
``Message.encode`` writes, a lone request's errors are named as a batch names them, and a
Redis that does not answer is ``QueueUnavailable``."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from dramatiq import Broker, Middleware
from dramatiq.message import Message

from router.enqueue import Router
from router.requests import JobRequest
from shared.errors import QueueUnavailable, ValidationFailed
from tiers.broker import TierBroker


class EnqueueSpy(Middleware):
    """Records the job ids its enqueue hooks saw."""

    def __init__(self) -> None:
        self.before: list[str] = []
        self.after: list[str] = []

    def before_enqueue(self, broker: Broker, message: Message[Any], delay: Any) -> None:
        self.before.append(message.options["st_job"])

    def after_enqueue(self, broker: Broker, message: Message[Any], delay: Any) -> None:
        self.after.append(message.options["st_job"])


def request(item: str) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item})


def test_enqueue_hooks_see_every_enqueue_of_a_middleware_added_late(
    router: Router, broker: TierBroker
) -> None:
    # Given enqueues ran while no middleware of the stack had enqueue hooks
    router.enqueue(request("before-spy"))
    # When a middleware with enqueue hooks joins the stack
    spy = EnqueueSpy()
    broker.add_middleware(spy)
    router.enqueue(request("one"))
    router.enqueue_many([request("two"), request("three")])
    # Then its hooks saw each enqueue since, before and after it
    assert spy.before == spy.after == ["plain-one", "plain-two", "plain-three"]


def test_the_stored_message_is_the_one_message_encode_writes(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    router.enqueue(request("bytes"))
    (redis_id,) = redis_client.lrange(f"{namespace}:t_plain.fast", 0, -1)
    stored = redis_client.hget(f"{namespace}:t_plain.fast.msgs", redis_id)
    assert stored is not None
    assert Message.decode(stored).encode() == stored


def test_a_lone_request_is_refused_with_the_names_a_batch_uses(router: Router) -> None:
    with pytest.raises(ValidationFailed) as single:
        router.enqueue(JobRequest(kind="t_plain", organization_id=0, params={}))
    with pytest.raises(ValidationFailed) as batch:
        router.enqueue_many([JobRequest(kind="t_plain", organization_id=0, params={})])
    assert single.value.errors == batch.value.errors
    assert "requests[0].organization_id" in single.value.errors


def test_a_redis_that_does_not_answer_is_queue_unavailable(router: Router) -> None:
    router.enqueue(request("warm"))
    pool = router.broker.client.connection_pool
    port = pool.connection_kwargs["port"]
    pool.connection_kwargs["port"] = 1  # nothing listens there
    router.broker.jobs.close()
    pool.disconnect()
    try:
        with pytest.raises(QueueUnavailable):
            router.enqueue(request("unanswered"))
    finally:
        pool.connection_kwargs["port"] = port
        pool.disconnect()
