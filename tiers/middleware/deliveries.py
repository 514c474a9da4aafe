"""Deliveries: every run starts through one script that checks its delivery is still this
worker's, counts the start and gives the run its fencing token; runs that keep dying end.

=====================================  ==========================================================
at a run's start (``start.lua``)        what happens
=====================================  ==========================================================
the delivery is still this worker's     the run starts with the next epoch of the job (its
                                        token); the settle carries it, and one carrying an older
                                        epoch is refused (``settle.lua``)
it is not (a peer took it back: this    not run and not acked (``lost``): a prefetched copy held
worker stalled past its heartbeat       through a stall never runs beside the redelivered one
timeout)
the job's last started run never        it counts as a run that died; at ``max_unsettled`` of
settled                                 them the job is failed (``worker_died``), its message
                                        dead-lettered and its slot released, in that step,
                                        logged at ERROR (a Sentry event) and counted in
                                        ``speedtier_jobs_total{outcome="worker_died"}``
an earlier run of the job died          it is started again only once nothing else runs in
                                        this process (``tiers.suspects``): a crash it causes
                                        is counted against it alone
=====================================  ==========================================================

A run whose delivery cannot have been taken back (the fetch that claimed it wrote this
worker's heartbeat, every heartbeat since reached Redis in time, ``tiers.beat_log``; the
fetch found no earlier run of the job that died, nor the job left ``active`` by a worker that
died) does not wait for ``start.lua``: the script goes ahead of the run's settle on the
settle sender, and the settle carries the start's id, refused unless that start is the
job's open one. Any other run waits for the script's verdict.

While runs go on, a thread asks every few seconds whether a newer run of each started
elsewhere and marks those deliveries lost (``tiers.deliveries.delivery_lost``: the answer a
handler can read without a round trip).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from dramatiq.broker import Broker
from dramatiq.common import q_name
from dramatiq.middleware import Middleware, SkipMessage

from tiers.deliveries import Delivery, Latch, later_start, set_current
from tiers.families import Family, family_of
from tiers.job_store import JobStore
from tiers.middleware.group_slots import FETCHED_AT, GroupSlots
from tiers.middleware.job_metrics import JOBS, tier_of_queue
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_retry import REDIS_DOWN, until_redis_answers
from tiers.settling import ACKED_IN_SETTLE
from tiers.suspects import SuspectGate

log = logging.getLogger(__name__)

#: The message attribute holding its run's fencing token, for the settle: its epoch, or
#: ``s:<start id>`` for a run started before its start's answer came.
EPOCH = "_st_epoch"
#: The message attribute holding its run's epoch once known (set with EPOCH for a run that
#: waited for its start; when the answer comes for one that did not).
RUN_EPOCH = "_st_run_epoch"
#: The message attribute saying how its run passed the suspect gate ("ordinary", "alone").
GATED = "_st_gated"
#: The longest a suspect run waits for the settles on their way before and after it.
FLUSH_SECONDS = 10.0
#: Runs of a job that may end without a settle before it fails as ``worker_died``.
DEFAULT_MAX_UNSETTLED = 3


def _draw_start_prefix() -> None:
    """This process's start ids' prefix: drawn again in a forked child, whose count would
    otherwise repeat its parent's."""
    global _start_prefix
    _start_prefix = f"{uuid4().hex}-"


_start_prefix = ""
_draw_start_prefix()
os.register_at_fork(after_in_child=_draw_start_prefix)
#: The starts of this process (every broker's): with the prefix, a start's id.
_starts = itertools.count(1)


class Deliveries(Middleware):
    """Start each claimed run (after :class:`GroupSlots` claimed it) and watch the running
    deliveries.

    Parameters:
      families: the family registry (a failed job's record retention).
      jobs: the broker's job store.
      slots: the group slots middleware (a run not started is forgotten there).
      max_unsettled: runs that ended without a settle before the job fails.
    """

    def __init__(
        self,
        families: Mapping[str, Family],
        jobs: JobStore,
        slots: GroupSlots,
        max_unsettled: int = DEFAULT_MAX_UNSETTLED,
    ) -> None:
        self.families = families
        self.jobs = jobs
        self.slots = slots
        self.max_unsettled = max_unsettled
        self._running: dict[str, Delivery] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.gate = SuspectGate()

    def _flush(self) -> None:
        self.jobs.flush_settles(FLUSH_SECONDS)

    def before_process_message(self, broker: Broker, message: Any) -> None:
        if not self.slots.was_claimed(message):
            return
        family = family_of(message, self.families)
        retention = family.retention_seconds if family else 86_400.0
        worker_id = broker.broker_id  # type: ignore[attr-defined]
        # The same for every try: a start whose reply was lost, sent again, is not counted
        # as a second run (nor its first try as a run that died). This process's prefix and
        # a count: unique without a system call per run (uuid4 reads the OS's random source,
        # letting go of the GIL, which the worker threads then queue up to take back).
        start_id = f"{_start_prefix}{next(_starts)}"

        def start(alone: bool) -> tuple[str, str]:
            return until_redis_answers(
                lambda: self.jobs.start(
                    message,
                    q_name(message.queue_name),
                    worker_id,
                    max_unsettled=self.max_unsettled,
                    retention_seconds=retention,
                    alone=alone,
                    start_id=start_id,
                ),
                what="starting a job",
            )

        self.gate.enter()
        setattr(message, GATED, "ordinary")
        fetched_at = getattr(message, FETCHED_AT, None)
        if fetched_at is not None and self.jobs.beats.unbroken_since(fetched_at):
            self._start_queued(message, worker_id, retention, start_id)
            return
        verdict, token = start(False)
        job_id = message.options[JOB_ID]
        if verdict == "suspect":
            log.warning(
                "job %s: %s earlier run(s) ended without a settle; it runs alone", job_id, token
            )
            self.gate.leave()
            setattr(message, GATED, None)
            self.gate.enter_alone(self._flush)
            setattr(message, GATED, "alone")
            verdict, token = start(True)
        if verdict == "run":
            setattr(message, EPOCH, token)
            setattr(message, RUN_EPOCH, token)
            delivery = Delivery(self.jobs, job_id, token)
            with self._lock:
                self._running[message.options[REDIS_MESSAGE_ID]] = delivery
            set_current(delivery)
            return
        self.slots.forget(message)
        if verdict in ("lost", "worker_died"):
            # Not this worker's to ack any more, or acked (dead-lettered) by the script.
            setattr(message, ACKED_IN_SETTLE, True)
        if verdict == "worker_died":
            JOBS.labels(message.actor_name, tier_of_queue(message.queue_name), verdict).inc()
            log.error(
                "job %s failed: worker_died (%s run(s) ended without a settle); dead-lettered",
                job_id,
                token,
            )
        elif verdict == "lost":
            log.warning("job %s not run: its delivery was taken back from this worker", job_id)
        else:
            log.info("job %s not run: %s", job_id, verdict)
        raise SkipMessage(verdict)

    def _start_queued(self, message: Any, worker_id: str, retention: float, start_id: str) -> None:
        """Start a run whose delivery cannot have been taken back (fetched, and this worker's
        heartbeats unbroken since, ``tiers.beat_log``; its job had no earlier run that died
        and was not left ``active`` by a worker that died): ``start.lua`` goes ahead of the
        run's settle on the settle sender, and the run begins now. Its settle carries the
        start's id as its token (``s:<start_id>``: refused unless that start is the job's
        open one); a verdict other than ``run`` marks the delivery lost."""
        job_id = message.options[JOB_ID]
        delivery = Delivery(self.jobs, job_id, "", start_id=start_id, answered=Latch())
        setattr(message, EPOCH, "s:" + start_id)

        def answered(reply: tuple[str, str] | None, error: Exception | None) -> None:
            try:
                self._start_answered(message, delivery, reply, error)
            finally:
                if delivery.answered is not None:
                    delivery.answered.set()

        with self._lock:
            self._running[message.options[REDIS_MESSAGE_ID]] = delivery
        set_current(delivery)
        self.jobs.start_later(
            message,
            q_name(message.queue_name),
            worker_id,
            max_unsettled=self.max_unsettled,
            retention_seconds=retention,
            start_id=start_id,
            then=answered,
        )

    def _start_answered(
        self,
        message: Any,
        delivery: Delivery,
        reply: tuple[str, str] | None,
        error: Exception | None,
    ) -> None:
        job_id = delivery.job_id
        if reply is None:
            log.error("job %s: its start failed (%s); its settle is refused", job_id, error)
            delivery.lost.set()
            return
        verdict, token = reply
        if verdict == "run":
            delivery.epoch = token
            setattr(message, RUN_EPOCH, token)
            return
        delivery.lost.set()
        if verdict == "worker_died":
            JOBS.labels(message.actor_name, tier_of_queue(message.queue_name), verdict).inc()
            log.error(
                "job %s failed: worker_died (%s run(s) ended without a settle); "
                "dead-lettered, and this run's settle is refused",
                job_id,
                token,
            )
        else:
            log.warning(
                "job %s: its start found it %s; this run's settle is refused", job_id, verdict
            )

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        self._done(message)

    def after_skip_message(self, broker: Broker, message: Any) -> None:
        self._done(message)

    def _done(self, message: Any) -> None:
        set_current(None)
        with self._lock:
            self._running.pop(message.options.get(REDIS_MESSAGE_ID), None)
        gated = getattr(message, GATED, None)
        setattr(message, GATED, None)
        if gated == "ordinary":
            self.gate.leave()
        elif gated == "alone":
            # Its settle was handed to the settle sender just before (the outcomes
            # middleware's hook runs first): the next run starts once it is answered.
            self.gate.leave_alone(self._flush)

    # -- watching the running deliveries ------------------------------------------------------

    def after_worker_boot(self, broker: Broker, worker: Any) -> None:
        timeout_s = getattr(broker, "heartbeat_timeout", 60_000) / 1000
        interval = max(0.2, min(5.0, timeout_s / 4))
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._watch, args=(interval,), name="delivery-check", daemon=True
        )
        self._thread.start()

    def after_worker_shutdown(self, broker: Broker, worker: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def check_running(self) -> int:
        """Mark the running deliveries a newer run of their job superseded; returns how
        many were newly marked."""
        # Each delivery is judged by what it was before the read: a start answered between
        # the two would otherwise compare the record as it was before that start (no epoch
        # yet, or the previous one) with the run's new epoch.
        with self._lock:
            running = [
                (d, d.epoch, d.start_id)
                for d in self._running.values()
                if (d.fenced or d.start_id) and not d.lost.is_set()
            ]
        epochs = self.jobs.epochs([d.job_id for d, _, _ in running])
        marked = 0
        for (delivery, mine, start_id), (epoch, open_start) in zip(running, epochs, strict=True):
            if mine not in ("", "0"):
                # Only a later start supersedes a run (a record replaced since, by a new job
                # of the same id, starts its epochs again: not a newer run of this delivery).
                superseded = later_start(epoch, mine)
            else:
                # Its start's answer not read yet: another start open means another run.
                superseded = open_start is not None and open_start != start_id
            if superseded:
                delivery.lost.set()
                marked += 1
                log.warning(
                    "job %s: run %s was delivered again elsewhere (this worker stalled); "
                    "its settle will be refused",
                    delivery.job_id,
                    delivery.epoch,
                )
        return marked

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.check_running()
            except REDIS_DOWN as exc:
                log.warning("delivery check: redis unreachable (%s); retrying", exc)
            except Exception:
                log.exception("delivery check failed; retrying")
