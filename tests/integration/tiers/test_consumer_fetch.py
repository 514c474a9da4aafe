"""When a worker's consumer fetches, and how much: once a quarter of its prefetch is free
(Dramatiq fetches after every ack, one round trip for a handful of messages), at most that
quarter (or twice its threads) at a time (twice that from a queue its last fetch found
holding at least two more), and after a fetch that found the queue running dry,
only once no more of its messages are left to run than twice its worker threads (a group's
settles feed its queue one message at a time; a run whose settle is on its way is over)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from tiers.broker import TierBroker
from tiers.consumer import TierConsumer
from tiers.consumer_thread import TierConsumerThread
from tiers.fair_order import ready_count
from tiers.settling import SETTLING, Settling
from tiers.work_queue import WorkQueue

QUEUE = "t_plain.fast"


def enqueue(router: Router, items: range) -> None:
    router.enqueue_many([JobRequest("t_plain", 1, {"item": str(i)}) for i in items])


def queued(redis_client: redis.Redis, namespace: str) -> int:
    return int(ready_count(redis_client, namespace, QUEUE))


def consumer_of(broker: TierBroker, prefetch: int) -> TierConsumer:
    consumer = broker.consume(QUEUE, prefetch=prefetch, timeout=10)
    assert isinstance(consumer, TierConsumer)
    return consumer


def test_the_next_fetch_waits_for_a_quarter_of_the_prefetch(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    enqueue(router, range(20))
    consumer = consumer_of(broker, prefetch=8)
    # Given a consumer that fetched its 8 and handed them all out
    handed = [next(consumer) for _ in range(8)]
    assert all(message is not None for message in handed)
    assert queued(redis_client, namespace) == 12
    # When one is acknowledged, Then nothing is fetched for one free place
    consumer.ack(handed[0])
    assert next(consumer) is None
    assert queued(redis_client, namespace) == 12
    # When a second one is (a quarter of 8 free), Then the next fetch takes both places
    consumer.ack(handed[1])
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 10
    consumer.close()


def ran_dry(router: Router, broker: TierBroker) -> tuple[TierConsumer, list[Any]]:
    """A consumer with 2 worker threads whose fetch found 8 messages where it asked for 10,
    all handed out, and 3 more messages enqueued since; returns it and the 8."""
    enqueue(router, range(8))
    consumer = consumer_of(broker, prefetch=40)
    consumer.worker_threads = 2
    handed = [next(consumer) for _ in range(8)]
    assert all(message is not None for message in handed)
    enqueue(router, range(8, 11))
    return consumer, handed


@pytest.mark.parametrize("ended", ["acked", "settle on its way"])
def test_after_the_queue_ran_dry_the_next_fetch_waits_until_the_threads_have_little_left(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str, ended: str
) -> None:
    # Given a fetch that found 8 messages where it asked for 10
    consumer, handed = ran_dry(router, broker)

    def end(message: Any) -> None:
        # A run over: acked, or its settle on its way (held: no answer, no ack yet)
        if ended == "acked":
            consumer.ack(message)
        else:
            consumer.ran(message)

    # When 3 runs end, leaving 7, then 6, then 5 of its messages to run (more than twice
    # its 2 threads)
    for message in handed[:3]:
        end(message)
        # Then the three new messages stay in the queue, for any worker to take
        assert next(consumer) is None
        assert queued(redis_client, namespace) == 3
    # When a fourth ends, leaving 4 (twice its threads), Then it fetches them
    end(handed[3])
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 0
    # And the answered settles' acks leave it counting none of them
    for message in handed[:4]:
        if ended != "acked":
            consumer.ack(message)
    assert consumer.settling == set()
    consumer.close()


def test_a_consumer_thread_counts_a_run_whose_settle_is_on_its_way_until_its_ack(
    router: Router, broker: TierBroker
) -> None:
    enqueue(router, range(1))
    thread = TierConsumerThread(
        broker=broker,
        queue_name=QUEUE,
        prefetch=4,
        work_queue=WorkQueue(),  # type: ignore[arg-type]
        worker_timeout=10,
    )
    consumer = thread.consumer = consumer_of(broker, prefetch=4)
    message = next(consumer)
    assert message is not None
    # Given a run that ended with its settle handed to the settle sender
    settling = Settling()
    setattr(message, SETTLING, settling)
    # When its thread posts it, Then the consumer counts it as run, not acked yet
    thread.post_process_message(message)
    assert consumer.settling == {message.message_id}
    assert message.message_id in consumer.queued_message_ids
    # When the settle is answered, Then the ack lets go of it
    settling.finish()
    assert consumer.settling == set()
    assert message.message_id not in consumer.queued_message_ids
    consumer.close()


def test_a_fetch_of_a_full_batch_does_not_wait_for_the_threads(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    enqueue(router, range(30))
    consumer = consumer_of(broker, prefetch=8)
    consumer.worker_threads = 1
    handed = [next(consumer) for _ in range(8)]
    consumer.ack(handed[0])
    consumer.ack(handed[1])
    # A full fetch says the queue is not running dry: a quarter free is enough
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 20
    consumer.close()


def test_a_fetch_takes_a_quarter_of_the_prefetch_and_leaves_the_rest_to_other_workers(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    enqueue(router, range(30))
    consumer = consumer_of(broker, prefetch=40)
    consumer.worker_threads = 2
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 20
    consumer.close()


def two_thread_consumer(
    router: Router,
    broker: TierBroker,
    monkeypatch: pytest.MonkeyPatch,
    jobs: int,
) -> TierConsumer:
    """A consumer of ``jobs`` queued jobs, prefetch 40 and 2 threads (a share: a quarter of
    40)."""
    enqueue(router, range(jobs))
    consumer = consumer_of(broker, prefetch=40)
    consumer.worker_threads = 2
    return consumer


def test_from_a_deep_queue_a_fetch_takes_two_shares(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = two_thread_consumer(router, broker, monkeypatch, 60)
    # Given a first fetch of one share, which found 50 more behind it
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 50
    assert broker.left_in_queue[QUEUE] == 50
    for _ in range(9):
        assert next(consumer) is not None
    # When it fetches again, Then it takes two shares: at least two more are left for others
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 30
    consumer.close()


def test_from_a_shallow_queue_a_fetch_takes_one_share(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = two_thread_consumer(router, broker, monkeypatch, 25)
    # Given a first fetch of one share, which left 15 (less than two shares) behind it
    for _ in range(10):
        assert next(consumer) is not None
    assert broker.left_in_queue[QUEUE] == 15
    # When it fetches again, Then one share: the rest stays for other workers
    assert next(consumer) is not None
    assert queued(redis_client, namespace) == 5
    consumer.close()
