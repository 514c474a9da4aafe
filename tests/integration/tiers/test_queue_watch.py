"""Idle queues are watched, not polled: a worker's consumers of empty queues sleep, and one
look a half poll interval asks Redis about all of them (``tiers.queue_watch``). What the
polls did goes on: a message sent to a sleeping queue runs, the worker's heartbeat goes on,
a dead worker's messages come back, and a stop is not held up by a sleeping consumer."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.queue_watch import QueueWatch
from tiers.worker import TierWorker

POLL_MS = 50


def plain(item: str) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item})


def plain_delayed(item: str) -> JobRequest:
    return JobRequest(
        kind="t_plain",
        organization_id=1,
        params={"item": item, "mode": "delay", "times": 1, "delay": 0.5},
    )


def _queues() -> list[str]:
    return [q for family in h.families().values() for q in family.queues()]


@contextmanager
def idle_worker(
    broker: TierBroker, longest_sleep: float | None = None, look_every: float | None = None
) -> Iterator[TierWorker]:
    """A worker over the harness's queues (and their delay queues) whose consumers have all
    gone to sleep; ``longest_sleep`` overrides how long a consumer sleeps without a wake, and
    ``look_every`` how often the watch looks (seconds)."""
    worker = TierWorker(broker, queues=set(_queues()), worker_threads=2, worker_timeout=POLL_MS)
    assert worker.watch is not None
    if longest_sleep is not None:
        worker.watch.longest_sleep = longest_sleep
    if look_every is not None:
        worker.watch.interval = look_every
    worker.start()
    try:
        h.wait_until(lambda: len(watch_of(worker).asleep()) == 2 * len(_queues()), timeout=10)
        yield worker
    finally:
        worker.stop(timeout=10_000)


def watch_of(worker: TierWorker) -> QueueWatch:
    assert worker.watch is not None
    return worker.watch


def _counting_fetches(broker: TierBroker) -> Counter[str]:
    fetches: Counter[str] = Counter()
    fetch = broker.fetch_messages

    def counted(queue_name: str, count: int) -> Any:
        fetches[queue_name] += 1
        return fetch(queue_name, count)

    broker.fetch_messages = counted  # type: ignore[method-assign]
    return fetches


def test_an_idle_workers_consumers_sleep_while_its_heartbeat_goes_on(
    broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    fetches = _counting_fetches(broker)
    with idle_worker(broker):
        # Given every consumer asleep (12 queues, main and delay)
        fetches.clear()
        beat = redis_client.zscore(f"{namespace}:__heartbeats__", broker.broker_id)
        # When a second goes by: 20 polls a queue, 240 fetches, before the watch
        time.sleep(1.0)
        # Then no consumer fetched (each sleeps up to 5 s without a wake)
        assert sum(fetches.values()) <= 2, fetches
        # and the watch kept the worker's heartbeat going, as the fetches did
        later = redis_client.zscore(f"{namespace}:__heartbeats__", broker.broker_id)
        assert beat is not None and later is not None and later > beat


def test_a_job_sent_to_a_sleeping_queue_runs_and_a_stop_wakes_every_sleeper(
    router: Router, broker: TierBroker
) -> None:
    # Given a worker whose consumers sleep and would not wake on their own for 10 minutes
    with idle_worker(broker, longest_sleep=600) as worker:
        # When a job is sent to one of the sleeping queues, the watch's look wakes its consumer
        answer = router.enqueue(plain("woken"))
        h.wait_until(lambda: h.state(broker, answer.job_id) == "completed", timeout=10)
        h.wait_until(lambda: len(watch_of(worker).asleep()) == 2 * len(_queues()), timeout=10)
        # And stopping the worker does not wait for the sleepers' 10 minutes
        stopped = threading.Event()
        started = time.monotonic()
        threading.Thread(target=lambda: (worker.stop(10_000), stopped.set()), daemon=True).start()
        assert stopped.wait(30)
    assert time.monotonic() - started < 10
    assert not watch_of(worker).thread.is_alive()


def test_a_delayed_job_moved_to_its_sleeping_queue_wakes_that_queues_consumer(
    router: Router, broker: TierBroker
) -> None:
    # Given a worker whose consumers all sleep, with no look and no wake of their own for 10
    # minutes: only a wake event makes one fetch
    queue = "t_plain.fast"
    with idle_worker(broker, longest_sleep=600, look_every=600) as worker:
        # and a job that asks to be delayed once, by half a second
        answer = router.enqueue(plain_delayed("later"))
        broker.wake(queue)  # (what the watch's look would do: it runs once, and is delayed)
        h.wait_until(lambda: h.state(broker, answer.job_id) == "delayed", timeout=10)
        h.wait_until(lambda: queue in watch_of(worker).asleep(), timeout=10)
        broker.wake(f"{queue}.DQ")  # the delay queue's consumer takes the delayed copy
        # When the job is due and this worker moves it back to its queue
        # Then the move wakes the queue's consumer, which runs it (no look would for 10 min)
        h.wait_until(lambda: h.state(broker, answer.job_id) == "completed", timeout=10)


def test_a_dead_workers_message_comes_back_while_every_consumer_sleeps(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a job that another worker fetched: in its ack set, out of the queue
    queue, heartbeats = "t_plain.fast", f"{namespace}:__heartbeats__"
    answer = router.enqueue(plain("orphan"))
    redis_id = redis_client.lpop(f"{namespace}:{queue}")
    assert redis_id is not None
    redis_client.sadd(f"{namespace}:__acks__.other-worker.{queue}", redis_id)
    redis_client.zadd(heartbeats, {"other-worker": int(time.time() * 1000)})
    # and a live worker whose consumers all sleep, with no wake of their own for 10 minutes
    with idle_worker(broker, longest_sleep=600):
        # When the other worker dies (its heartbeat long stopped) while no consumer fetches
        redis_client.zadd(heartbeats, {"other-worker": 1})
        # Then the dead-worker check hands the message back, wakes its consumer, and the job
        # runs
        h.wait_until(lambda: h.state(broker, answer.job_id) == "completed", timeout=15)
    assert not redis_client.exists(f"{namespace}:__acks__.other-worker.{queue}")


def test_the_liveness_probe_counts_the_watch_among_the_workers_threads(
    broker: TierBroker,
) -> None:
    from tiers.worker import threads_alive

    with idle_worker(broker) as worker:
        assert threads_alive(worker)
        # When the watch's thread is gone, the sleepers would only poll every 5 s: the
        # worker is not healthy, and its liveness probe says so
        watch_of(worker).stop()
        assert not threads_alive(worker)
