"""The native XCALLY completion hand-off (ENG-3242 of seed 001): what Rails' ``Xcally#process``
does once the recording is attached, done by the native pass (:mod:`services.uploads.native`).

| step | when | the ``sync_completion`` ledger row |
| --- | --- | --- |
| ``record`` | in the persistence transaction | inserted, or reopened if failed |
| ``dispatch`` | after that commit and the attachment | ``accepted`` (best effort) |
| the enqueue fails | | ``uncertain`` (best effort) |
| the dispatch claim was delivered before | | untouched (nothing dispatched) |
| an earlier dispatch's claim is unresolved | | ``uncertain``, Sentry warning |

``dispatch`` runs under Rails' own dispatch claim, ``conversation-upload/sync-completion/<id>``
in ``outbound_delivery_claims`` (:func:`~services.rails.delivery_claims.deliver_once`): the
native pass, Rails' ``Xcally#process`` and its GoodJob fallback share it, so whichever lands
first marks it delivered and every later pass, on either side, dispatches nothing. Without
it a Rails reprocess after the flag is turned off, arriving once the pinned job's 7-day
retention has passed, would complete the conversation a second time.

``record`` inserts the row pending, owned by API2, with ``sync_run_id =
xcally-upload-<id>``; ``dispatch`` enqueues ``provider_conversation_sync_completion_xcally-
upload-<id>`` (:func:`~services.uploads.families.completion_request`). A failed enqueue
raises ``EnqueueFailed``, retryable: the process job retries and re-derives the same id.
The ledger row exists only with ``api2_conversation_upload_durable_delivery`` on for the
organization.

The enqueue goes through the family's 7-day retention, so a retried pass whose completion
job is queued, running or finished collapses onto it (``deduplicated``): the completion is
handed off once. With the durable ledger off there is no row; the enqueue and its retry
are the same. The completion job marks the row completed
(:mod:`services.uploads.completion`). A pass killed between its commit and its enqueue
leaves the row pending and owned by API2: the job's redelivery dispatches it, and the
reconciler takes it after the grace window otherwise (:mod:`services.uploads.reconciler`).

:func:`replace_completion_job` is the other way in: the reconciler's replay and an
operator's re-drive (``speedtier uploads resolve-completion``) re-add the job replacing its
finished record, which the 7-day dedupe would otherwise swallow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.requests import route_all
from services.rails.delivery_claims import DeliveryOutcome, NotDelivered, deliver_once
from services.uploads import ledger
from services.uploads.errors import UploadProcessingRetryable
from services.uploads.families import completion_request
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import QueueUnavailable
from shared.observability import warn
from tiers.options import KEEP_FINISHED
from tiers.redis_retry import REDIS_DOWN

#: The source whose processor hands completion off (``Xcally#process``).
HANDED_OFF_SOURCE = "xcally"
#: Names the hand-off in the "... delivery outcome uncertain" Sentry warning.
DISPATCH_WHAT = "XCALLY upload completion hand-off"


def dispatch_key(upload_id: int) -> str:
    """Rails' claim on the completion hand-off of an upload (``Xcally#process`` takes it
    before its enqueue call; the native pass takes the same one)."""
    return f"conversation-upload/sync-completion/{upload_id}"


def enqueue_failed(message: str) -> UploadProcessingRetryable:
    return UploadProcessingRetryable("EnqueueFailed", message)


@dataclass(frozen=True)
class CompletionHandOff:
    """One native pass's completion hand-off.

    Parameters:
      router: where the completion job goes.
      durable: the durable delivery ledger is on for the organization (the row is kept).
    """

    router: Router
    durable: bool

    def record(
        self,
        session: Session,
        organization_id: int,
        upload_id: int,
        conversation_id: int,
        now: datetime,
    ) -> None:
        """Inside the persistence transaction (the caller commits)."""
        if self.durable:
            ledger.record_sync_completion(session, organization_id, upload_id, conversation_id, now)

    def dispatch(
        self,
        sessions: sessionmaker[Session],
        organization_id: int,
        upload_id: int,
        conversation_id: int,
    ) -> str:
        """Under Rails' dispatch claim ``conversation-upload/sync-completion/<id>``: enqueue
        the completion job, then mark the row accepted; the enqueue's outcome, or
        ``already_dispatched`` when the claim was delivered before (by Rails' processor, its
        GoodJob fallback or an earlier pass), or ``uncertain`` when an earlier dispatch's
        outcome is unknown (left for ``speedtier uploads resolve-completion``).

        Raises:
          UploadProcessingRetryable: ``EnqueueFailed`` (Redis refused the job); the claim
            was released and the row marked uncertain.
          Delay: another dispatch of this upload holds a fresh claim.
        """
        enqueued: list[str] = []

        def send() -> None:
            try:
                (answer,) = self.router.enqueue_many(
                    [completion_request(organization_id, upload_id, conversation_id)]
                )
            except QueueUnavailable as exc:
                # The job id is deterministic and kept 7 days, so re-sending after a refusal
                # that did land dedupes: releasing the claim is safe.
                if self.durable:
                    self._mark(sessions, organization_id, upload_id, f"enqueue failed: {exc}")
                failure = enqueue_failed(f"completion of upload {upload_id}: {exc}")
                raise NotDelivered(str(exc), outcome=failure) from exc
            enqueued.append(answer.outcome)

        outcome = deliver_once(
            sessions,
            dispatch_key(upload_id),
            send,
            what=DISPATCH_WHAT,
            context={"organization_id": organization_id, "conversation_upload_id": upload_id},
        )
        if outcome is DeliveryOutcome.ALREADY_SENT:
            return "already_dispatched"
        if outcome is DeliveryOutcome.UNCERTAIN:
            if self.durable:
                self._mark(sessions, organization_id, upload_id, "dispatch claim unresolved")
            return "uncertain"
        if self.durable:
            self._mark(sessions, organization_id, upload_id, None)
        return enqueued[0]

    @staticmethod
    def _mark(
        sessions: sessionmaker[Session], organization_id: int, upload_id: int, error: str | None
    ) -> None:
        """Best effort, as every API2 mark that follows a durable effect: a failed mark is
        reported and left for the reconciler."""
        now = utcnow()
        try:
            with session_scope(sessions) as session:
                if error is None:
                    ledger.mark_accepted(
                        session, organization_id, upload_id, now, "sync_completion"
                    )
                else:
                    ledger.mark_uncertain(
                        session, organization_id, upload_id, "sync_completion", error[:2000], now
                    )
                session.commit()
        except Exception as exc:
            warn(
                "conversation upload ledger sync_completion hand-off mark failed",
                fingerprint=["speedtier", "uploads", "ledger-hand-off"],
                conversation_upload_id=upload_id,
                error=str(exc),
            )


def replace_completion_job(
    router: Router, organization_id: int, upload_id: int, conversation_id: int
) -> str:
    """Re-add the completion job, replacing a finished record of the same id; the outcome
    (``replaced``, ``added``, or ``deduplicated`` onto a live job).

    Raises:
      QueueUnavailable: Redis did not take the job.
    """
    request = completion_request(organization_id, upload_id, conversation_id)
    (job,) = route_all(router.registry, [request])
    message = router.message_for(job).copy(options={KEEP_FINISHED: False})
    try:
        (result,) = router.brokers.of_tier(job.tier).enqueue_identified([message])
    except REDIS_DOWN as exc:
        raise QueueUnavailable(f"Redis did not accept the job: {exc}") from exc
    return result.outcome
