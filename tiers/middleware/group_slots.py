"""Group slots: before a run, drop stale copies and take the job's group slot; keep the
slots of running jobs leased, and reap the slots of workers that died."""

from __future__ import annotations

import logging
import threading
from typing import Any

from dramatiq.broker import Broker
from dramatiq.common import q_name
from dramatiq.middleware import Middleware, SkipMessage

from shared import metrics
from tiers.faults import fault_point
from tiers.job_store import JobStore
from tiers.middleware.job_metrics import tier_of_queue
from tiers.options import GROUP, JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_retry import REDIS_DOWN, until_redis_answers

log = logging.getLogger(__name__)

#: The message attribute holding when the fetch that claimed it was sent (None: claimed at
#: start, or its job has an earlier run that died); ``Deliveries`` reads it.
FETCHED_AT = "_st_fetched_at"

GROUP_PARKED = metrics.counter(
    "group_parked",
    "Jobs parked at claim because their group was at its concurrency cap.",
    ["family", "tier"],
)


class GroupSlots(Middleware):
    """Take the claim made at fetch (``TierBroker.fetch_messages``; at start when that
    failed), keep the slots leased while their jobs wait in this worker or run; the outcomes
    middleware settles and releases.

    Parameters:
      jobs: the job store of the broker.
      refresh_seconds: how often running jobs' leases are pushed forward (keep it well under
        the lease) and expired leases reaped.
    """

    def __init__(self, jobs: JobStore, refresh_seconds: float | None = None) -> None:
        self.jobs = jobs
        self.refresh_seconds = refresh_seconds or max(0.2, jobs.lease_ms / 1000 / 4)
        self._running: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- per message -------------------------------------------------------------------------

    def before_process_message(self, broker: Broker, message: Any) -> None:
        options = message.options
        if JOB_ID not in options:
            return
        # Claimed when its batch was fetched (TierBroker.fetch_messages), unless that failed.
        setattr(message, FETCHED_AT, self.jobs.take_fetched_at(options[REDIS_MESSAGE_ID]))
        verdict = self.jobs.take_fetch_claim(options[REDIS_MESSAGE_ID])
        if verdict is None:
            worker_id = broker.broker_id  # type: ignore[attr-defined]
            verdict = until_redis_answers(
                lambda: self.jobs.claim(message, q_name(message.queue_name), worker_id),
                what="claiming a job",
            )
        if verdict == "parked":
            GROUP_PARKED.labels(message.actor_name, tier_of_queue(message.queue_name)).inc()
        if verdict != "run":
            log.info("job %s not run: %s", options[JOB_ID], verdict)
            raise SkipMessage(verdict)
        fault_point("claim.after")
        with self._lock:
            self._running[options[REDIS_MESSAGE_ID]] = (
                options.get(GROUP, ""),
                options[JOB_ID],
            )

    def was_claimed(self, message: Any) -> bool:
        with self._lock:
            return message.options.get(REDIS_MESSAGE_ID) in self._running

    def forget(self, message: Any) -> None:
        with self._lock:
            self._running.pop(message.options.get(REDIS_MESSAGE_ID), None)

    # -- leases ------------------------------------------------------------------------------

    def after_worker_boot(self, broker: Broker, worker: Any) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep_leases, name="group-leases", daemon=True)
        self._thread.start()

    def after_worker_shutdown(self, broker: Broker, worker: Any) -> None:
        # Only now: leases must outlive the drain of in-flight jobs.
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _keep_leases(self) -> None:
        while not self._stop.wait(self.refresh_seconds):
            try:
                with self._lock:
                    held = [entry for entry in self._running.values() if entry[0]]
                held += self.jobs.fetched_slots()
                self.jobs.refresh_leases(held)
                reaped = self.jobs.reap()
                if reaped:
                    log.warning("reaped %d group slot(s) whose worker stopped answering", reaped)
            except REDIS_DOWN as exc:
                log.warning("lease upkeep: redis unreachable (%s); retrying", exc)
            except Exception:
                log.exception("lease upkeep failed; retrying")
