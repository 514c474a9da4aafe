"""Run a Dramatiq worker over one tier's queues until told to stop, then drain.

SIGTERM or SIGINT: stop fetching, let in-flight jobs finish within the drain period, and hand
prefetched messages back to their queues. A job still running when the drain period ends
stays unacknowledged and is redelivered once the broker sees this worker's heartbeat stop.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterable
from types import FrameType

from tiers.broker import TierBroker
from tiers.consumer import TierWorker

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
) -> None:
    """Consume ``queues`` with ``threads`` worker threads until SIGTERM/SIGINT (or ``stop``).

    Parameters:
      prefetch: messages fetched ahead per queue; 0 means ``threads * 2`` (Dramatiq's).
      drain_seconds: how long in-flight jobs get to finish after a stop request.
      poll_ms: the longest an idle consumer sleeps between fetches; also how late a due
        delayed message may be moved to its queue.
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
        stop.wait()
        return
    worker = TierWorker(broker, queues=queues, worker_threads=threads, worker_timeout=poll_ms)
    if prefetch:
        worker.queue_prefetch = prefetch
    worker.start()
    log.info("worker consuming %s with %d threads", ", ".join(sorted(queues)), threads)
    stop.wait()
    worker.stop(timeout=int(drain_seconds * 1000))
    log.info("worker stopped")
