"""A worker starts its worker threads before its consumers, and its tier's queues' consumers
before the delay queues': a message the first fetch brings finds a thread waiting for it
(Dramatiq starts every consumer first). Real Redis, a real TierWorker."""

from __future__ import annotations

from typing import Any

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.worker import TierWorker


class RecordingWorker(TierWorker):
    """A TierWorker noting, as each consumer is added, the queue and the worker threads
    already started."""

    def __init__(self, broker: TierBroker, **options: Any) -> None:
        super().__init__(broker, **options)
        self.added: list[tuple[str, int]] = []

    def _add_consumer(self, queue_name: str, *, delay: bool = False) -> None:
        if queue_name not in self.consumers:
            self.added.append((queue_name, len(self.workers)))
        super()._add_consumer(queue_name, delay=delay)


def test_worker_threads_start_before_the_consumers_and_queues_before_delay_queues(
    broker: TierBroker,
) -> None:
    queues = sorted({q for f in h.families().values() for q in f.queues()})
    worker = RecordingWorker(broker, queues=set(queues), worker_threads=3, worker_timeout=50)

    worker.start()
    worker.stop(timeout=5_000)

    # Then every consumer was added once all three worker threads had started
    assert worker.added and {threads for _, threads in worker.added} == {3}
    # and the tier's queues came first, their delay queues after
    names = [name for name, _ in worker.added]
    assert names[: len(queues)] == queues
    assert sorted(names[len(queues) :]) == sorted(f"{q}.DQ" for q in queues)


def test_a_message_waiting_before_the_worker_starts_is_run(
    broker: TierBroker, router: Router
) -> None:
    # Given a job enqueued before any worker runs
    router.enqueue(JobRequest("t_plain", 1, {"item": "waiting"}))
    # When a worker starts, Then it runs it
    with h.running_worker(broker, threads=2):
        h.wait_until(lambda: h.state(broker, "plain-waiting") == "completed", timeout=30)
