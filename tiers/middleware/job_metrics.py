"""Job metrics: every settled run counted by family, tier and outcome, and its duration.

========================================  ===================================================
metric                                    what it counts
========================================  ===================================================
``speedtier_jobs_total``                  settled runs; ``outcome`` is the job's state after
{family, tier, outcome}                   the run (``completed``, ``record_missing``,
                                          ``skipped``, ``failed``), ``retried`` for a failed
                                          attempt that will run again, ``delayed`` for a
                                          delay that spent no attempt
``speedtier_job_run_seconds``             wall time from the claim to the settlement
{family, tier}
========================================  ===================================================

Runs that were not claimed (a stale copy, a parked one) are not runs and are not counted.
The outcomes middleware leaves its settlement on the message (:data:`SETTLEMENT`); this
middleware sits before it in the stack, so its ``after_process_message`` runs after it.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from dramatiq.broker import Broker
from dramatiq.common import q_name
from dramatiq.middleware import Middleware

from shared import metrics

#: Message attributes (on the in-memory message proxy, never on the wire).
STARTED_AT = "_speedtier_started_at"
SETTLEMENT = "_speedtier_settlement"

JOBS = metrics.counter(
    "jobs", "Settled job runs by family, tier and outcome.", ["family", "tier", "outcome"]
)
RUN_SECONDS = metrics.histogram(
    "job_run_seconds", "Job run time from claim to settlement.", ["family", "tier"]
)


@functools.lru_cache(maxsize=4096)
def tier_of_queue(queue_name: str) -> str:
    """``kb_document_sync.fast`` (or its delay queue) -> ``fast`` (kept: asked several times
    per run, of a few queue names)."""
    return q_name(queue_name).rsplit(".", 1)[-1]


def outcome_of(state: str, error: str) -> str:
    """The ``outcome`` label of a settlement: a delayed state with an error is a retry."""
    if state == "delayed" and error:
        return "retried"
    return state


class JobMetrics(Middleware):
    """Start the clock after the claim, count the settlement after the outcomes middleware.

    The labelled children are kept per label values: ``labels()`` validates and looks them
    up under a lock on every call, which cost a no-op job more than the count itself."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def before_process_message(self, broker: Broker, message: Any) -> None:
        setattr(message, STARTED_AT, time.monotonic())

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        settlement = getattr(message, SETTLEMENT, None)
        if settlement is None:
            return
        family, queue = message.actor_name, message.queue_name
        outcome = outcome_of(settlement.state, settlement.error)
        count = self._counts.get((family, queue, outcome))
        if count is None:
            count = JOBS.labels(family, tier_of_queue(queue), outcome)
            self._counts[family, queue, outcome] = count
        count.inc()
        started = getattr(message, STARTED_AT, None)
        if started is not None:
            timer = self._timers.get((family, queue))
            if timer is None:
                timer = self._timers[family, queue] = RUN_SECONDS.labels(
                    family, tier_of_queue(queue)
                )
            timer.observe(time.monotonic() - started)
