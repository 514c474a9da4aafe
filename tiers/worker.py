"""Run a Dramatiq worker over one tier's queues until told to stop, then drain.

SIGTERM or SIGINT: stop fetching, let in-flight jobs finish within the drain period, and hand
prefetched messages back to their queues. A job still running when the drain period ends
stays unacknowledged and is redelivered once the broker sees this worker's heartbeat stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from dramatiq import Worker
from dramatiq.common import q_name
from dramatiq.worker import WorkerThread, _WorkerMiddleware

from tiers.ack_retries import AckRetries
from tiers.broker import TierBroker
from tiers.consumer_thread import TierConsumerThread
from tiers.dead_workers import DeadWorkers
from tiers.gc_tuning import tune_worker_collector
from tiers.outage_log import SharedOutage
from tiers.queue_watch import QueueWatch
from tiers.thread_stop import StopHonoured
from tiers.work_queue import WorkQueue

log = logging.getLogger(__name__)


def serve(
    broker: TierBroker,
    queues: Iterable[str],
    *,
    threads: int,
    prefetch: int = 0,
    drain_seconds: float = 25.0,
    poll_ms: int = 500,
    stop: threading.Event | None = None,
    on_beat: Callable[[], None] | None = None,
    beat_seconds: float = 5.0,
    watch: bool = True,
    on_start: Callable[[], None] | None = None,
    tune_collector: bool = True,
) -> None:
    """Consume ``queues`` with ``threads`` worker threads until SIGTERM/SIGINT (or ``stop``).

    Parameters:
      prefetch: messages fetched ahead per queue; 0 means ``threads * 2`` (Dramatiq's).
      drain_seconds: how long in-flight jobs get to finish after a stop request.
      poll_ms: the longest an idle consumer sleeps between fetches; also how late a due
        delayed message may be moved to its queue.
      on_beat: called every ``beat_seconds`` while every consumer and worker thread is alive
        (the liveness heartbeat); a dead thread stops the beats, so the probe fails.
      watch: idle queues are watched by one look for all (``tiers.queue_watch``); False
        leaves each consumer polling its own (the benchmarks' baseline).
      on_start: called once the worker's threads run (its consumers fetch meanwhile), or
        once it idles for want of queues.
      tune_collector: tune the garbage collector (``tiers.gc_tuning``) before the threads
        start; False leaves it to the caller (a worker that builds more once it consumes
        tunes it afterwards, so what it builds is frozen too).
    """
    queues = set(queues)
    stop = stop or threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: draining", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    if not queues:
        # A tier no registered family uses yet: stay up (the pool is deployed per tier) but idle.
        log.warning("no registered family uses this tier; idling until stopped")
        if on_start:
            on_start()
        if on_beat:
            on_beat()
        while not stop.wait(beat_seconds if on_beat else None):
            if on_beat:
                on_beat()
        return
    worker = TierWorker(
        broker, queues=queues, worker_threads=threads, worker_timeout=poll_ms, watch=watch
    )
    if prefetch:
        worker.queue_prefetch = prefetch
    if tune_collector and threading.current_thread() is threading.main_thread():
        # This process is a worker (not a test serving in a thread of its own process).
        tune_worker_collector()
    worker.start()
    log.info("worker consuming %s with %d threads", ", ".join(sorted(queues)), threads)
    if on_start:
        on_start()
    beating = True
    if on_beat and threads_alive(worker):
        on_beat()
    while not stop.wait(beat_seconds if on_beat else None):
        if on_beat is None:
            continue
        if threads_alive(worker):
            on_beat()
            beating = True
        elif beating:
            log.error("a consumer or worker thread died: no more heartbeats (liveness fails)")
            beating = False
    worker.stop(timeout=int(drain_seconds * 1000))
    log.info("worker stopped")


def threads_alive(worker: TierWorker) -> bool:
    """Every consumer thread (one per queue), worker thread, the dead-worker check and the
    queue watch of ``worker`` is running."""
    threads = [*worker.consumers.values(), *worker.workers, worker.dead_workers.thread]
    if worker.watch is not None:
        threads.append(worker.watch.thread)
    return bool(threads) and all(thread.is_alive() for thread in threads)


class TierWorkerThread(StopHonoured, WorkerThread):
    """Dramatiq's worker thread, keeping a ``stop()`` that came before it ran."""


class TierWorker(Worker):
    """Dramatiq's worker with :class:`TierConsumerThread` consumers, whose stop waits for
    the settles still on their way (up to its timeout), and which starts its worker threads
    before its consumers.

    Dramatiq starts a consumer thread per queue and delay queue (eighteen for a fast-tier
    worker) and only then its worker threads, so a message its first fetch brings waits in
    the work queue while the remaining threads start, each start waiting for the interpreter
    lock that the running consumers hold: about 60 ms. Here the worker threads start first,
    then the consumers of the tier's queues, then the delay queues'; the middleware hooks run
    in Dramatiq's order (``before_worker_boot`` first, ``after_worker_boot`` last)."""

    broker: TierBroker

    def __init__(self, broker: TierBroker, *, watch: bool = True, **options: Any) -> None:
        super().__init__(broker, **options)
        # Before any thread starts (start() makes them): the same order, cheaper per message.
        self.work_queue = WorkQueue()  # type: ignore[assignment]
        #: Looks at the queues whose consumers sleep (``tiers.queue_watch``); None: every
        #: consumer polls its queue (Dramatiq's way; the benchmarks' baseline).
        self.watch = QueueWatch(broker, self.worker_timeout) if watch else None
        #: Returns dead workers' messages of this worker's queues (``tiers.dead_workers``).
        self.dead_workers = DeadWorkers(
            broker, lambda: sorted(self.consumers), self.worker_timeout / 1000
        )
        #: Acks of settled runs that met a lost connection (``tiers.ack_retries``).
        self.ack_retries = AckRetries()
        #: One report per outage for all its consumers (``tiers.outage_log.SharedOutage``).
        self.outage = SharedOutage(logging.getLogger("tiers.consumer"), "worker consumers")

    def start(self) -> None:
        if self.watch is not None:
            self.watch.start()
        self.broker.emit_before("worker_boot", self)
        for _ in range(self.worker_threads):
            self._add_worker()
        for queue in sorted(self.consumer_whitelist or ()):
            self._add_consumer(queue)
        # Dramatiq's own: consumers for every other declared queue (the delay queues here,
        # each queue's once) and for queues declared later.
        self.broker.add_middleware(_WorkerMiddleware(self))
        self.broker.emit_after("worker_boot", self)
        self.dead_workers.start()

    def stop(self, timeout: int = 600_000) -> None:
        started = time.monotonic()
        super().stop(timeout)
        left = max(0.0, timeout / 1000 - (time.monotonic() - started))
        if not self.broker.jobs.flush_settles(max(left, 1.0)):
            log.warning(
                "settles still unanswered at shutdown: their messages return after this "
                "worker's heartbeat expires"
            )
        left = max(0.0, timeout / 1000 - (time.monotonic() - started))
        if not self.ack_retries.flush(max(left, 1.0)):
            log.warning(
                "%d ack(s) of settled runs still failing at shutdown: their messages return "
                "after this worker's heartbeat expires (their outcomes are recorded)",
                self.ack_retries.pending(),
            )
        if self.watch is not None:
            self.watch.stop()
        self.dead_workers.stop()

    def _add_worker(self) -> None:
        worker = TierWorkerThread(
            broker=self.broker,
            consumers=self.consumers,
            work_queue=self.work_queue,
            worker_timeout=self.worker_timeout,
        )
        worker.start()
        self.workers.append(worker)

    def _add_consumer(self, queue_name: str, *, delay: bool = False) -> None:
        if queue_name in self.consumers:
            return
        if self.consumer_whitelist and q_name(queue_name) not in self.consumer_whitelist:
            return
        thread = self.consumers[queue_name] = TierConsumerThread(
            broker=self.broker,
            queue_name=queue_name,
            prefetch=self.delay_prefetch if delay else self.queue_prefetch,
            work_queue=self.work_queue,
            worker_timeout=self.worker_timeout,
        )
        thread.worker_threads = None if delay else self.worker_threads
        thread.watch = self.watch
        thread.ack_retries = self.ack_retries
        thread.outage = self.outage
        thread.start()
