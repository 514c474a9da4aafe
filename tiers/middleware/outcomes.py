"""Outcomes: every way a run can end, classified once, in place of Dramatiq's Retries.

============================  ================  ==================================
how the run ended              job state         what happens next
============================  ================  ==================================
returned                       completed         record kept for the retention
RecordMissing                  record_missing    record kept for the retention
Paused                         skipped           record kept for the retention
Unrecoverable                  failed            message dead-lettered, no retry
Delay(until)                   delayed           back at ``until``, attempt NOT spent
PostgreSQL / Redis unreachable delayed           back in OUTAGE_DELAY_SECONDS, attempt
                                                 NOT spent (an outage is not the job's)
anything else (Retryable...)   delayed / failed  retried per family policy until the
                                                 attempts run out, then failed
============================  ================  ==================================

:func:`classify` reads this table (exception -> :class:`Settlement`); :class:`Outcomes`
records the settlement, its slot release and its next delivery in one atomic step.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from dramatiq.broker import Broker
from dramatiq.common import dq_name, q_name
from dramatiq.middleware import Middleware

from shared.errors import Delay, JobError, Paused, RecordMissing, Retryable, Unrecoverable
from shared.outages import is_infrastructure_outage
from tiers.broker import ACKED_IN_SETTLE, TierBroker
from tiers.families import Family, family_of
from tiers.faults import fault_point
from tiers.job_store import JobStore
from tiers.middleware.group_slots import GroupSlots
from tiers.middleware.held import Held
from tiers.options import ETA, FAILURES, JOB_ID, REDIS_MESSAGE_ID, WINDOW_RESERVATION
from tiers.policies import DEFAULT_RETRY, RetryPolicy
from tiers.redis_retry import until_redis_answers

log = logging.getLogger(__name__)

#: How long a job waits when the run failed because PostgreSQL or Redis was unreachable,
#: plus up to half again at random, so a recovering store is not met by every job at once.
OUTAGE_DELAY_SECONDS = 5.0


class Outcomes(Middleware):
    """Settle each claimed run in the job store, atomically with its slot release and, for
    a retry or delay, with the message's return to the broker."""

    def __init__(self, families: Mapping[str, Family], jobs: JobStore, slots: GroupSlots) -> None:
        self.families = families
        self.jobs = jobs
        self.slots = slots

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if not self.slots.was_claimed(message):
            return
        fault_point("run.after")
        try:
            self._settle(broker, message, exception)
        finally:
            self.slots.forget(message)
        fault_point("settle.after")

    def _settle(self, broker: Broker, message: Any, exception: BaseException | None) -> None:
        family = family_of(message, self.families)
        retention = family.retention_seconds if family else 86_400.0
        settlement = classify(message, exception, family.retry if family else DEFAULT_RETRY)
        if settlement.state == "failed":
            message.fail()
        # A message that is not dead-lettered is acked to Dramatiq by the settle script itself
        # (TierConsumer skips its own ack); a failed one is nacked by Dramatiq as usual.
        ack = None
        if not message.failed and isinstance(broker, TierBroker):
            ack = (message.queue_name, broker.broker_id)
        verdict = until_redis_answers(
            lambda: self.jobs.settle(
                message,
                state=settlement.state,
                retention_seconds=retention,
                error=settlement.error,
                failures=settlement.failures,
                next_message=settlement.next_message,
                delay=settlement.delay,
                ack=ack,
            ),
            what="settling a job",
        )
        if ack is not None:
            setattr(message, ACKED_IN_SETTLE, True)
        if verdict == "stale":
            log.warning("job %s was superseded while it ran", message.options[JOB_ID])


@dataclass(frozen=True)
class Settlement:
    """How a run ends, as the job store records it.

    Attributes:
      state: the job's state (``completed``, ``record_missing``, ``skipped``, ``failed``,
        ``delayed``); a ``failed`` message is dead-lettered.
      failures: attempts spent, this run's included when it consumed one.
      next_message: the copy that goes back to the broker (a retry or a delay), if any.
      error: ``Type: text`` of a real failure ("" for a success or a delay: a delay is not
        an error, so the record's last_error keeps the last real failure).
      delay: why a delayed job waits ("" otherwise).
    """

    state: str
    failures: int
    next_message: Any = None
    error: str = ""
    delay: str = ""


def classify(message: Any, exception: BaseException | None, policy: RetryPolicy) -> Settlement:
    """The settlement of a run that ended with ``exception`` (None: it returned), under the
    family's retry ``policy``: the table at the top of this module."""
    if isinstance(exception, Held):
        exception = exception.outcome
    if _is_outage(exception):
        log.warning(
            "job %s met an infrastructure outage (%s); delayed, attempt not spent",
            message.options[JOB_ID],
            exception,
        )
        wait = OUTAGE_DELAY_SECONDS * (1 + random.random() / 2)
        exception = Delay.after(wait, reason=f"outage: {exception}"[:200])
    failures = int(message.options.get(FAILURES, 0))
    if exception is None:
        return Settlement("completed", failures)
    if isinstance(exception, Delay):
        again = _again_at(message, exception.until, failures, exception.carry)
        return Settlement("delayed", failures, again, delay=f"{exception.reason}: {exception}")
    error = f"{type(exception).__name__}: {exception}"
    if isinstance(exception, RecordMissing):
        return Settlement("record_missing", failures, error=error)
    if isinstance(exception, Paused):
        return Settlement("skipped", failures, error=error)
    if isinstance(exception, Unrecoverable):
        return Settlement("failed", failures, error=error)
    failures += 1
    if failures >= policy.max_attempts:
        return Settlement("failed", failures, error=error)
    wait = policy.backoff_seconds(failures)
    log.info(
        "job %s attempt %d failed (%s); retrying in %.1fs",
        message.options[JOB_ID],
        failures,
        error,
        wait,
    )
    return Settlement("delayed", failures, _again_at(message, time.time() + wait, failures), error)


def _again_at(
    message: Any, until: float, failures: int, carry: Mapping[str, str] | None = None
) -> Any:
    """The copy of ``message`` delivered again at ``until`` (a retry or a delay)."""
    options = {
        REDIS_MESSAGE_ID: str(uuid4()),
        ETA: int(until * 1000),
        FAILURES: failures,
        WINDOW_RESERVATION: None,  # a window reservation is good for one delivery only
        **(carry or {}),
    }
    return message.copy(queue_name=dq_name(q_name(message.queue_name)), options=options)


def _is_outage(exception: BaseException | None) -> bool:
    """A run that failed on a lost PostgreSQL/Redis connection; never a classified outcome
    other than a plain ``Retryable``."""
    if exception is None or (
        isinstance(exception, JobError) and not isinstance(exception, Retryable)
    ):
        return False
    return is_infrastructure_outage(exception)
