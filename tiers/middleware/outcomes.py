"""Outcomes: every way a run can end, classified once, in place of Dramatiq's Retries.

============================  ================  ==================================
how the run ended              job state         what happens next
============================  ================  ==================================
returned                       completed         record kept for the retention
RecordMissing                  record_missing    record kept for the retention
Paused                         skipped           record kept for the retention
Cancelled (an operator)        cancelled         record kept for the retention, no retry
DeliveryLost                   delayed           the settle is refused when a newer run
                                                 of the job holds it (``tiers.deliveries``);
                                                 if none does, back in 0.5 s, attempt NOT
                                                 spent (the job never ends unrun)
Unrecoverable                  failed            message dead-lettered, no retry
Delay(until)                   delayed           back at ``until``, attempt NOT spent
PostgreSQL / Redis unreachable delayed           back in OUTAGE_DELAY_SECONDS, attempt
                                                 NOT spent (an outage is not the job's)
Delay longer than the ceiling  delayed           back after the family's
                                                 ``max_delay_seconds`` (provider
                                                 delays), with a warning
Delay past the delay limit     delayed / failed  counts as a failed attempt
                                                 (``DelaysExhausted``), see below
anything else (Retryable...)   delayed / failed  retried per family policy until the
                                                 attempts run out, then failed
============================  ================  ==================================

Delays without end: a delay's ``source`` (``shared.errors.Delay``) says who asked to wait.
Provider delays (429 + Retry-After, 529) and outage delays build a streak carried on the
message (``st_delays``, ``st_dsince``); platform pacing (our rate windows, politeness) neither
counts nor breaks it. When one more delay would put the streak past the family's
``RetryPolicy.max_consecutive_delays`` (provider delays) or ``max_delayed_seconds`` (age of
the streak), the run settles as a failed ``DelaysExhausted`` attempt instead: retried with
backoff and a fresh streak, or failed on the last attempt. Any attempt that ends (a failure,
a retry) starts the next delivery with no streak. A delay that carries a new checkpoint
(``st_ckpt``: the unit committed progress before it, e.g. a listing resumed page by page)
is progress, not a stall: the streak starts again from that delay.

:func:`classify` reads this table (exception -> :class:`Settlement`); :class:`Outcomes`
records the settlement, its slot release and its next delivery in one atomic step. The
worker thread does not wait for it: the settle goes to the job store's settle sender (one
round trip for the settles of every thread meanwhile), and the message's ack and release
wait for its answer (``tiers.settling.Settling``).
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

from shared.errors import (
    Cancelled,
    Delay,
    DelaysExhausted,
    DeliveryLost,
    JobError,
    Paused,
    RecordMissing,
    Retryable,
    Unrecoverable,
)
from shared.outages import is_infrastructure_outage
from tiers.attempts import delay_streak, set_running_policy
from tiers.broker import ACKED_IN_SETTLE, TierBroker
from tiers.families import Family, family_of
from tiers.faults import fault_point
from tiers.job_store import JobStore
from tiers.middleware.deliveries import EPOCH
from tiers.middleware.group_slots import GroupSlots
from tiers.middleware.held import Held
from tiers.middleware.job_metrics import SETTLEMENT
from tiers.options import (
    CHECKPOINT,
    DELAY_SINCE,
    DELAY_STREAK,
    ETA,
    FAILURES,
    JOB_ID,
    REDIS_MESSAGE_ID,
    WINDOW_RESERVATION,
)
from tiers.policies import DEFAULT_RETRY, RetryPolicy
from tiers.run_rates import run_count
from tiers.settling import SETTLING, Settling

log = logging.getLogger(__name__)

#: How long a job waits when the run failed because PostgreSQL or Redis was unreachable,
#: plus up to half again at random, so a recovering store is not met by every job at once.
OUTAGE_DELAY_SECONDS = 5.0


class Outcomes(Middleware):
    """Settle each claimed run in the job store, atomically with its slot release, its count
    in the run rates and, for a retry or delay, with the message's return to the broker."""

    def __init__(self, families: Mapping[str, Family], jobs: JobStore, slots: GroupSlots) -> None:
        self.families = families
        self.jobs = jobs
        self.slots = slots

    def before_process_message(self, broker: Broker, message: Any) -> None:
        family = family_of(message, self.families)
        set_running_policy(family.retry if family else None)

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        set_running_policy(None)
        if not self.slots.was_claimed(message):
            return
        fault_point("run.after")
        try:
            self._settle(broker, message, exception)
        finally:
            self.slots.forget(message)

    def _settle(self, broker: Broker, message: Any, exception: BaseException | None) -> None:
        family = family_of(message, self.families)
        retention = family.retention_seconds if family else 86_400.0
        settlement = classify(message, exception, family.retry if family else DEFAULT_RETRY)
        if settlement.state == "failed":
            message.fail()
            cause = exception.outcome if isinstance(exception, Held) else exception
            if isinstance(cause, Retryable):
                # Dramatiq logged it at info (actors declare Retryable as thrown): say here,
                # once, that the job is now failed for good.
                log.error(
                    "job %s failed after %d attempt(s): %s",
                    message.options[JOB_ID],
                    settlement.failures,
                    settlement.error,
                )
        # A message that is not dead-lettered is acked to Dramatiq by the settle script itself
        # (TierConsumer skips its own ack); a failed one is nacked by Dramatiq as usual.
        ack = None
        if not message.failed and isinstance(broker, TierBroker):
            ack = (message.queue_name, broker.broker_id)
        args = self.jobs.settle_args(
            message,
            state=settlement.state,
            retention_seconds=retention,
            error=settlement.error,
            failures=settlement.failures,
            next_message=settlement.next_message,
            delay=settlement.delay,
            ack=ack,
            count=run_count(self.jobs.namespace, message),
            epoch=getattr(message, EPOCH, ""),
        )
        setattr(message, SETTLEMENT, settlement)
        # The thread goes on to its next job; the message's ack waits for the answer.
        settling = Settling()
        setattr(message, SETTLING, settling)

        def settled(verdict: str | None, error: Exception | None) -> None:
            if error is not None:
                log.error("settling job %s failed: %s", message.options[JOB_ID], error)
            else:
                if ack is not None:
                    setattr(message, ACKED_IN_SETTLE, True)
                if verdict == "stale":
                    log.warning("job %s was superseded while it ran", message.options[JOB_ID])
                elif verdict == "released" and isinstance(broker, TierBroker):
                    broker.wake(message.queue_name)
                fault_point("settle.after")
            settling.finish()

        self.jobs.settle_later(args, settled)


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
    if isinstance(exception, DeliveryLost):
        # A newer run holds the job: this settle is refused (its token is old). Should the
        # delivery still be this run's after all, the job runs again rather than end unrun.
        exception = Delay.after(0.5, reason=f"delivery lost: {exception}"[:200], source="outage")
    if _is_outage(exception):
        log.warning(
            "job %s met an infrastructure outage (%s); delayed, attempt not spent",
            message.options[JOB_ID],
            exception,
        )
        wait = OUTAGE_DELAY_SECONDS * (1 + random.random() / 2)
        exception = Delay.after(wait, reason=f"outage: {exception}"[:200], source="outage")
    failures = int(message.options.get(FAILURES, 0))
    if exception is None:
        return Settlement("completed", failures)
    if isinstance(exception, Delay):
        delayed = _delayed(message, exception, failures, policy)
        if delayed is not None:
            return delayed
        streak, since = delay_streak(message.options)
        exception = DelaysExhausted(
            f"{streak} provider delay(s) over {time.time() - (since or time.time()):.0f}s "
            f"without progress; last: {exception}"
        )
    error = f"{type(exception).__name__}: {exception}"
    if isinstance(exception, RecordMissing):
        return Settlement("record_missing", failures, error=error)
    if isinstance(exception, Paused):
        return Settlement("skipped", failures, error=error)
    if isinstance(exception, Cancelled):
        return Settlement("cancelled", failures, error=error)
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


def _delayed(message: Any, delay: Delay, failures: int, policy: RetryPolicy) -> Settlement | None:
    """The settlement of ``delay`` with the message's delay streak extended; None when the
    streak would pass the policy's limit (the attempt is spent instead)."""
    now = time.time()
    streak, since = delay_streak(message.options)
    checkpoint = delay.carry.get(CHECKPOINT)
    if checkpoint and checkpoint != message.options.get(CHECKPOINT):
        streak, since = 0, None  # the unit made progress before this delay
    if policy.delay_spends_attempt(delay.source, streak, since, now):
        return None
    carry: dict[str, Any] = dict(delay.carry)
    if delay.source != "pacing":
        carry[DELAY_STREAK] = streak + (1 if delay.source == "provider" else 0)
        carry[DELAY_SINCE] = since if since is not None else now
    else:  # pacing keeps whatever streak the job had
        carry[DELAY_STREAK] = streak
        carry[DELAY_SINCE] = since
    until = delay.until
    if delay.source == "provider":
        until = policy.bounded_delay_until(until, now)
        if until < delay.until:
            log.warning(
                "job %s: provider asked to wait %.0fs (%s); waiting the ceiling of %.0fs",
                message.options[JOB_ID],
                delay.until - now,
                delay.reason,
                policy.max_delay_seconds,
            )
    again = _again_at(message, until, failures, carry)
    said = f"{delay}" if until == delay.until else f"{delay}, bounded to {until:.3f}"
    return Settlement("delayed", failures, again, delay=said)


def _again_at(
    message: Any, until: float, failures: int, carry: Mapping[str, Any] | None = None
) -> Any:
    """The copy of ``message`` delivered again at ``until`` (a retry or a delay); a retry
    (no ``carry``) starts with no delay streak."""
    options = {
        REDIS_MESSAGE_ID: str(uuid4()),
        ETA: int(until * 1000),
        FAILURES: failures,
        WINDOW_RESERVATION: None,  # a window reservation is good for one delivery only
        DELAY_STREAK: 0,
        DELAY_SINCE: None,
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
