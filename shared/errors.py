"""The one exception tree every handler, route and provider client speaks.

``SpeedtierError`` is the root of every error the project defines: the job outcomes under
``JobError``, ``ValidationFailed`` and ``QueueUnavailable`` for the API, and the domain
errors of the service packages (``DocumentBusy``, ``DocumentTooLarge``, ...).

Handlers raise the ``JobError`` outcomes; the outcomes middleware in ``tiers`` classifies
them once:

========================  ==========================================================
exception                  outcome
========================  ==========================================================
``RecordMissing``          completes as ``record_missing`` (missing or cross-tenant)
``Unrecoverable``          fails at once, no retry
``Retryable`` (or any      retried under the family's policy; the attempt is consumed
unexpected exception)
``Delay(until)``           delivered again at ``until``; the attempt is NOT consumed,
                           unless the job's streak of provider/outage delays passes its
                           family's limit (``tiers.policies.RetryPolicy``)
``Paused``                 completes as ``skipped`` (kill switch raised)
========================  ==========================================================
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal

#: Who asked a job to wait (see :class:`Delay`).
DelaySource = Literal["provider", "outage", "pacing"]


class SpeedtierError(Exception):
    """Root of every exception the project defines."""


class JobError(SpeedtierError):
    """Base of every outcome a handler can signal."""


class RecordMissing(JobError):
    """The record a job acts on does not exist, or belongs to another organization."""


class Unrecoverable(JobError):
    """A failure no retry can fix: a provider 4xx other than 429, bad credentials, unknown type."""


class Retryable(JobError):
    """A transient failure (429 without Retry-After, 5xx, transport error)."""


class DelaysExhausted(Retryable):
    """A job's streak of provider/outage delays passed its family's limit: the attempt is
    spent as if it had failed (``tiers.policies.RetryPolicy.max_consecutive_delays``)."""


class Delay(JobError):
    """Deliver the job again at ``until`` (epoch seconds) without spending an attempt.

    Parameters:
      until: epoch seconds at which the job should run again.
      reason: a short word for logs and the job record (``window``, ``retry-after``, ...).
      carry: message options the delayed delivery carries (a window reservation).
      source: who asked to wait, which decides whether the delay counts toward the family's
        limit on consecutive delays (``RetryPolicy.max_consecutive_delays`` /
        ``max_delayed_seconds``):

        - ``provider`` (the default, so an unlabelled delay can never wait forever): a
          third party said "later" (429 with Retry-After, 529 overload). Nothing on our
          side guarantees it ever says yes, so it counts toward both limits.
        - ``outage``: our own PostgreSQL/Redis or flag store was unreachable. The wait
          between two such delays is ours (a few seconds), so their number says nothing;
          only the time since the streak began counts.
        - ``pacing``: a platform-internal window (provider windows, the embedder's window,
          per-host politeness) reserved the job a later start. A window always admits in
          bounded time, so it never counts, and it neither extends nor ends a streak.
    """

    def __init__(
        self,
        until: float,
        reason: str = "delay",
        carry: Mapping[str, str] | None = None,
        source: DelaySource = "provider",
    ) -> None:
        super().__init__(f"{reason}: delayed until {until:.3f}")
        self.until = until
        self.reason = reason
        self.carry = dict(carry or {})
        self.source: DelaySource = source

    @classmethod
    def after(
        cls, seconds: float, reason: str = "delay", source: DelaySource = "provider"
    ) -> Delay:
        """A delay of ``seconds`` from now."""
        return cls(time.time() + max(0.0, seconds), reason, source=source)


class Paused(JobError):
    """The family's kill switch is raised; the job completes as skipped."""

    def __init__(self, flag: str) -> None:
        super().__init__(f"paused by flag {flag}")
        self.flag = flag


class Cancelled(JobError):
    """An operator cancelled the job (``tiers.cancellation``): it ends as ``cancelled`` and is
    never retried. Raised by :func:`shared.cancel_point.cancel_point` at a handler's next step
    or provider call, or into the running thread once the cancel's grace has passed."""

    def __init__(self, reason: str = "cancelled by an operator") -> None:
        super().__init__(reason)


class DeliveryLost(JobError):
    """The running job's delivery was taken back from this worker (it stalled past its
    heartbeat timeout) and runs elsewhere: the handler stops, and its settle is refused."""


class ValidationFailed(SpeedtierError):
    """A request failed validation; ``errors`` maps a field path to its message."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class ConflictingFields(ValidationFailed):
    """A request the API document accepts whose fields contradict each other or the stored
    record it names (a pinned id naming another record, a credential or setting of another
    provider than the stored connection's); ``errors`` maps each field path to why. The API
    answers 409: the request is well formed, the state it meets refuses it."""


class QueueUnavailable(SpeedtierError):
    """The queue store (Redis) could not durably accept the work.

    Attributes:
      accepted: the answers (``router.enqueue.Enqueued``) of the requests of the call that
        were enqueued before the failure, by their index in the call: empty when the call
        was one round trip to one Redis (all or nothing), filled when it spanned several
        (batches over ``BATCH_SIZE``, tiers on different Redis servers).
      unknown: the job ids of the requests whose outcome is not known, by index
        (:class:`EnqueueOutcomeUnknown`).
    """

    def __init__(
        self,
        message: str = "",
        *,
        accepted: Mapping[int, object] | None = None,
        unknown: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.accepted: dict[int, object] = dict(accepted or {})
        self.unknown: dict[int, str] = dict(unknown or {})


class QueueFull(QueueUnavailable):
    """Redis is out of memory (``maxmemory`` reached under ``noeviction``) and refused the
    writes; none of the refused requests was enqueued."""


class EnqueueOutcomeUnknown(QueueUnavailable):
    """Redis was sent the requests and did not answer (a stall, a connection lost while
    waiting): the requests in ``unknown`` may or may not be enqueued. Sending them again is
    safe: their job ids are deterministic, so one that is waiting, delayed or running is
    deduplicated."""


class WindowFull(SpeedtierError):
    """A call's guard window (``tiers.rate_window.WindowGuard``) was full: nothing was done.
    ``ends_at``: the epoch seconds at which that window ends."""

    def __init__(self, ends_at: float) -> None:
        super().__init__(f"the guard's window is full until {ends_at:.3f}")
        self.ends_at = ends_at


class NotConfigured(SpeedtierError):
    """A setting the process needs is missing (the message names it); commands print it."""
