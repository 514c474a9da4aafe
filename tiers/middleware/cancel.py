"""Operator cancels at the worker: the gate before a run, the watch over running jobs.

=====================  =====================================================================
piece                  what it does
=====================  =====================================================================
:class:`CancelWatch`   one thread per worker process: every second reads the cancels in
                       flight (``tiers.cancellation``), marks the running jobs among them
                       (their cancel point then raises), raises ``Cancelled`` into a job's
                       thread once the grace has passed (again after each further grace while
                       it runs on), and publishes the worker and what it runs
:class:`CancelGate`    before the actor (after the slot claim): a job whose cancel is known
                       ends as cancelled without running; after its settle, the cancel entry
                       of a job that ended for good is dropped
:class:`RunningJobs`   around the actor alone (next to ``TimeLimit``, so neither a claim nor
                       a settle can be interrupted): registers the thread's job with the
                       watch and installs its cancel point
=====================  =====================================================================

The hard stop uses Dramatiq's own ``raise_thread_exception`` (as its ``TimeLimit`` does).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from dramatiq.broker import Broker
from dramatiq.middleware import Middleware
from dramatiq.middleware.threading import raise_thread_exception

from shared import cancel_point
from shared.errors import Cancelled, DeliveryLost
from tiers.cancellation import (
    POLL_SECONDS,
    PUBLISH_EVERY_SECONDS,
    CancelRequest,
    forget_cancel,
    publish_worker,
    read_cancels,
    unpublish_worker,
)
from tiers.deliveries import delivery_lost
from tiers.job_store import now_ms
from tiers.middleware.held import Held
from tiers.middleware.job_metrics import SETTLEMENT
from tiers.options import JOB_ID

log = logging.getLogger(__name__)


@dataclass
class _Run:
    job_id: str
    started: float
    cancel: CancelRequest | None = None
    stopped_at: float = 0.0


class CancelWatch:
    """The cancels a worker process knows of, and the jobs its threads run.

    Parameters:
      grace_seconds: how long a running job has to stop at a cancel point before
        ``Cancelled`` is raised into its thread.
    """

    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self.cancels: dict[str, CancelRequest] = {}
        self._running: dict[int, _Run] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._changed = True
        #: Set once the cancels have been read since the watch started (set while no watch
        #: runs): until then a run waits for the first read (:meth:`known`), so a job
        #: cancelled while no worker ran never starts. The watch's thread reads them while
        #: the worker's threads start and fetch, rather than the worker's start waiting.
        self._first_read = threading.Event()
        self._first_read.set()

    # -- the worker threads' side ----------------------------------------------------------

    def started(self, job_id: str) -> None:
        ident, cancel = threading.get_ident(), self.known().get(job_id)
        with self._lock:
            self._running[ident] = _Run(job_id, time.time(), cancel)
            self._changed = True
        cancel_point.install(lambda: self.check(ident))

    def finished(self) -> None:
        cancel_point.clear()
        with self._lock:
            self._running.pop(threading.get_ident(), None)
            self._changed = True

    def known(self) -> dict[str, CancelRequest]:
        """The cancels in flight, once the watch has read them since it started."""
        if not self._first_read.is_set():  # a flag read: no lock once the read is done
            self._first_read.wait()
        return self.cancels

    def check(self, ident: int) -> None:
        """The cancel point of thread ``ident``: raise ``Cancelled`` once its job's cancel
        has been seen, and ``DeliveryLost`` once the run is known to have lost its delivery
        (``tiers.deliveries``: it stalled and the job runs elsewhere), so a handler stops at
        its next step or provider call either way."""
        run = self._running.get(ident)
        if run is not None and run.cancel is not None:
            raise Cancelled(f"cancelled by {run.cancel.operator}")
        if delivery_lost():
            raise DeliveryLost("this run's delivery was taken back: the job runs elsewhere")

    # -- the watch thread ------------------------------------------------------------------

    def start(self, broker: Any, queues: list[str], threads: int) -> None:
        self._stop = threading.Event()  # a broker may serve one worker after another
        self._first_read = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(broker, queues, threads), name="cancel-watch", daemon=True
        )
        self._thread.start()

    def stop(self, broker: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            unpublish_worker(broker.client, broker.namespace, broker.broker_id)
        except Exception as exc:  # Redis down at shutdown: the entry outlives its heartbeat
            log.warning("could not unpublish worker %s: %s", broker.broker_id, exc)

    def _loop(self, broker: Any, queues: list[str], threads: int) -> None:
        try:  # before any run starts (known() waits for it)
            self.cancels = read_cancels(broker.client, broker.namespace)
        except Exception as exc:  # Redis unreachable: the runs wait no longer; read again below
            log.warning("cancel watch: %s", exc)
        finally:
            self._first_read.set()
        published = 0.0
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.cancels = read_cancels(broker.client, broker.namespace)
                self._enforce(time.time())
                if self._changed or time.monotonic() - published > PUBLISH_EVERY_SECONDS:
                    self._publish(broker, queues, threads)
                    published = time.monotonic()
            except Exception as exc:  # a Redis outage: try again next second
                log.warning("cancel watch: %s", exc)

    def _enforce(self, now: float) -> None:
        with self._lock:
            for ident, run in self._running.items():
                run.cancel = run.cancel or self.cancels.get(run.job_id)
                if run.cancel is None:
                    continue
                since = max(run.cancel.at_ms / 1000, run.started, run.stopped_at)
                if now - since >= self.grace_seconds:
                    log.warning(
                        "job %s did not stop within %.0fs of its cancel: stopping its thread",
                        run.job_id,
                        self.grace_seconds,
                    )
                    run.stopped_at = now
                    raise_thread_exception(ident, Cancelled)  # type: ignore[no-untyped-call]

    def _publish(self, broker: Any, queues: list[str], threads: int) -> None:
        with self._lock:
            running = [
                {"job": run.job_id, "started_ms": int(run.started * 1000)}
                for run in self._running.values()
            ]
            self._changed = False
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": sorted(queues),
            "threads": threads,
            "running": running,
            "at_ms": now_ms(),
        }
        publish_worker(broker.client, broker.namespace, broker.broker_id, info)


class CancelGate(Middleware):
    """End a run whose job was cancelled before its actor; drop the cancel once its job
    has ended for good."""

    def __init__(self, watch: CancelWatch) -> None:
        self.watch = watch

    def before_process_message(self, broker: Broker, message: Any) -> None:
        request = self.watch.known().get(message.options.get(JOB_ID, ""))
        if request is not None:
            raise Held(Cancelled(f"cancelled by {request.operator}"))

    def after_process_message(
        self, broker: Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        job_id = message.options.get(JOB_ID, "")
        settlement = getattr(message, SETTLEMENT, None)
        # A delayed job is cancelled when it is back: its entry stays until then.
        ended = settlement is not None and settlement.state != "delayed"
        if job_id in self.watch.cancels and ended:
            forget_cancel(broker.client, broker.namespace, job_id)  # type: ignore[attr-defined]
            self.watch.cancels.pop(job_id, None)


class RunningJobs(Middleware):
    """Register each running job with the watch around its actor; start and stop the watch
    with the worker."""

    def __init__(self, watch: CancelWatch) -> None:
        self.watch = watch

    def before_worker_boot(self, broker: Broker, worker: Any) -> None:
        queues = sorted(q for q in (worker.consumer_whitelist or ()) if not q.endswith(".DQ"))
        self.watch.start(broker, queues, int(getattr(worker, "worker_threads", 0)))

    def before_worker_shutdown(self, broker: Broker, worker: Any) -> None:
        self.watch.stop(broker)

    def before_process_message(self, broker: Broker, message: Any) -> None:
        job_id = message.options.get(JOB_ID)
        if job_id:
            self.watch.started(job_id)

    def after_process_message(
        self, broker: Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        try:
            self.watch.finished()
        except Cancelled:
            # A hard stop that reached the thread just as its run ended: the run settles
            # as it ended on its own.
            self.watch.finished()

    after_skip_message = after_process_message
