"""A stop that comes right after start, before the threads ran, is honoured: the consumer
and worker threads end at once instead of running until the drain period gives up on them.
Real Redis, a real TierWorker."""

from __future__ import annotations

import threading
import time

from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.consumer_thread import TierConsumerThread
from tiers.work_queue import WorkQueue
from tiers.worker import TierWorkerThread, serve


def test_a_consumer_thread_stopped_before_it_runs_does_not_run(broker: TierBroker) -> None:
    # Given a consumer thread told to stop before its run began
    thread = TierConsumerThread(
        broker=broker,
        queue_name="t_plain.fast",
        prefetch=4,
        work_queue=WorkQueue(),  # type: ignore[arg-type]
        worker_timeout=50,
    )
    thread.stop()
    # When it starts, then it ends at once (before: it consumed until the process exited)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_worker_thread_stopped_before_it_runs_does_not_run(broker: TierBroker) -> None:
    thread = TierWorkerThread(
        broker=broker,
        consumers={},
        work_queue=WorkQueue(),  # type: ignore[arg-type]
        worker_timeout=50,
    )
    thread.stop()
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_worker_stopped_as_it_starts_does_not_wait_its_drain_period(
    broker: TierBroker,
) -> None:
    # Given a stop request already raised when the worker starts (a SIGTERM within
    # milliseconds of start) and a drain period of a minute
    stop = threading.Event()
    stop.set()
    queues = [q for f in h.families().values() for q in f.queues()]
    began = time.monotonic()
    # When it serves, then it returns long before the drain period
    serve(broker, queues, threads=4, stop=stop, poll_ms=50, drain_seconds=60)
    assert time.monotonic() - began < 30
