"""A run started before start.lua answered (tiers.middleware.deliveries) settles with the
start's id as its token: its settle is accepted only while that start is the job's open one,
so a run of the job started again elsewhere fences it as a waited-for start's epoch does."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.deliveries import Delivery, Latch
from tiers.middleware.deliveries import DEFAULT_MAX_UNSETTLED, Deliveries

QUEUE = "t_plain.fast"


def started(broker: TierBroker, message: object, start_id: str) -> tuple[str, str]:
    return broker.jobs.start(
        message,  # type: ignore[arg-type]
        QUEUE,
        broker.broker_id,
        max_unsettled=DEFAULT_MAX_UNSETTLED,
        retention_seconds=60,
        alone=True,
        start_id=start_id,
    )


def test_a_settle_carrying_the_start_id_is_fenced_by_a_later_start(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    # Given a job fetched and started by this worker under start id "first"
    router.enqueue(JobRequest("t_plain", 1, {"item": "a"}))
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    message = next(consumer)
    assert message is not None
    assert started(broker, message, "first")[0] == "run"
    # When the job is started again (a run that outlived its worker's heartbeat, delivered
    # again) under another id
    assert started(broker, message, "second")[0] == "run"
    # Then the first run's settle is refused, and the second's accepted
    assert broker.jobs.settle(message, state="completed", retention_seconds=60,
                              epoch="s:first") == "stale"  # fmt: skip
    assert h.state(broker, "plain-a") == "active"
    assert broker.jobs.settle(message, state="completed", retention_seconds=60,
                              epoch="s:second") == "ok"  # fmt: skip
    assert h.state(broker, "plain-a") == "completed"
    consumer.close()


def test_a_worker_runs_jobs_with_starts_on_their_way_once_each(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    # Given jobs fetched while this worker's heartbeats reach Redis
    router.enqueue_many([JobRequest("t_plain", 1, {"item": f"on-{i}"}) for i in range(20)])
    # When a worker runs them
    with h.running_worker(broker, threads=4):
        h.wait_until(lambda: all(h.state(broker, f"plain-on-{i}") == "completed"
                                 for i in range(20)))  # fmt: skip
    # Then each ran once, and its record holds no open start (each settle was accepted)
    for i in range(20):
        record = broker.jobs.record(f"plain-on-{i}")
        assert record is not None and record["attempts"] == "1" and "open" not in record
        assert record["epoch"] == "1"


def test_the_delivery_watcher_keeps_a_run_whose_start_is_answered_while_it_looks(
    router: Router, broker: TierBroker, redis_client: redis.Redis
) -> None:
    # Given a run of this worker whose start is on its way (no epoch yet)
    router.enqueue(JobRequest("t_plain", 1, {"item": "w"}))
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    message = next(consumer)
    assert message is not None
    [deliveries] = [m for m in broker.middleware if isinstance(m, Deliveries)]
    delivery = Delivery(broker.jobs, "plain-w", "", start_id="mine", answered=Latch())
    deliveries._running["w"] = delivery
    read = broker.jobs.epochs

    def epochs_then_answer(job_ids: Sequence[str]) -> list[tuple[str | None, str | None]]:
        # The watcher reads the record before the start is processed; its answer comes
        # before the watcher compares.
        seen = read(job_ids)
        verdict, token = started(broker, message, "mine")
        assert verdict == "run"
        delivery.epoch = token
        delivery.answered.set()  # type: ignore[union-attr]
        return seen

    broker.jobs.epochs = epochs_then_answer  # type: ignore[method-assign]
    try:
        # When the delivery watcher looks
        assert deliveries.check_running() == 0
    finally:
        del broker.jobs.epochs
    # Then the run is not taken for one delivered again elsewhere: it still holds the job
    assert not delivery.lost.is_set()
    assert deliveries.check_running() == 0
    # And a later start elsewhere is seen
    assert started(broker, message, "theirs")[0] == "run"
    assert deliveries.check_running() == 1 and delivery.lost.is_set()
    consumer.close()
