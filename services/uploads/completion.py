"""The XCALLY completion job (ENG-2948), ``provider_conversation_sync_completion_<run id>``.

Rails' ``Xcally#process`` hands conversation completion to API2 once the recording attachment
is committed (``POST /internal/provider_conversation_sync_completions/enqueue``,
:mod:`services.uploads.routes`). The job then asks Rails to run ``complete_conversation_sync``
for the conversation, the work the retired ``CompleteConversationSyncJob`` did:

``POST /internal/conversations/:conversation_id/complete_conversation_sync``
``{"organization_id", "conversation_upload_id", "sync_run_id"}``

(the seed names the step, "the completion worker finished complete_conversation_sync", not
the endpoint: this is the narrowest reading, one Rails call per completion).

The call is claimed in ``outbound_delivery_claims`` through
:func:`services.rails.delivery_claims.deliver_once` under
``conversation-upload/sync-completion/<upload id>/complete_conversation_sync``. (The seed's
own key, ``conversation-upload/sync-completion/<upload id>``, is the *dispatch* claim Rails
takes before calling the enqueue route and marks delivered on its 202; reusing it here would
read Rails' delivered dispatch as "already sent" and never complete.)

| Rails answers | claim | job | ledger row (sync_completion) |
| --- | --- | --- | --- |
| 2xx | delivered | completed | completed |
| claim already delivered | untouched | completed, nothing sent | completed |
| 404 (conversation gone) | released | record_missing | failed (``conversation gone``) |
| 429 + Retry-After | released | delayed, no attempt spent | untouched |
| other 4xx (proven rejection) | released | failed (Sentry exception) | failed |
| 5xx (proven rejection) | released | retried (five attempts) | failed after the last |
| timeout / transport (ambiguous) | unresolved, Sentry warning | completed | left (reconciler) |

With ``api2_conversation_upload_sync_completion`` off for the organization when the job runs,
it completes as ``skipped`` and calls nothing (the seed's non-racing revert).

The effects listed in ``PROVIDER_SYNC_NATIVE_EFFECTS`` run here after Rails' call, each under
its own claim (:mod:`services.uploads.completion_effects`), and Rails' body names them in
``native_effects``; with every completion effect listed, Rails' call is skipped altogether.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from services.rails.client import RailsClient, RailsError
from services.rails.delivery_claims import DeliveryOutcome, NotDelivered, deliver_once
from services.uploads import ledger
from services.uploads.completion_effects import COMPLETION_EFFECTS, NativeEffects
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay, JobError, Paused, RecordMissing, Unrecoverable
from shared.observability import report_exception, warn
from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION
from tiers.attempts import current_attempt
from tiers.policies import UPLOAD_RETRY

log = logging.getLogger(__name__)

COMPLETE_PATH = "/internal/conversations/{id}/complete_conversation_sync"
WHAT = "xcally sync completion"


def claim_key(upload_id: int) -> str:
    return f"conversation-upload/sync-completion/{upload_id}/complete_conversation_sync"


@dataclass(frozen=True)
class SyncCompletions:
    """What the completion job needs: Rails, the database, the rollout flag, and the
    completion effects done here (:mod:`services.uploads.completion_effects`; none: Rails
    does every effect)."""

    rails: Callable[[], RailsClient]
    sessions: sessionmaker[Session]
    enabled: Callable[[int], bool]
    native: tuple[str, ...] = ()
    effects: NativeEffects | None = None

    def complete(
        self,
        organization_id: int,
        conversation_upload_id: int,
        conversation_id: int,
        sync_run_id: str,
    ) -> DeliveryOutcome:
        if not self.enabled(organization_id):
            raise Paused(f"{CONVERSATION_UPLOAD_SYNC_COMPLETION} is off for this organization")
        body: dict[str, Any] = {
            "organization_id": organization_id,
            "conversation_upload_id": conversation_upload_id,
            "sync_run_id": sync_run_id,
        }
        if self.native:
            body["native_effects"] = list(self.native)

        def send() -> dict[str, Any]:
            try:
                return self.rails().post(COMPLETE_PATH.format(id=conversation_id), body)
            except Delay as exc:  # Rails answered 429: proven, nothing done
                raise NotDelivered(str(exc), outcome=exc) from exc
            except RailsError as exc:
                if exc.answered and isinstance(exc, JobError):
                    raise NotDelivered(str(exc), outcome=exc) from exc
                raise  # no answer: ambiguous, the claim stays unresolved

        try:
            outcome = DeliveryOutcome.SENT
            if any(effect not in self.native for effect in COMPLETION_EFFECTS):
                outcome = deliver_once(
                    self.sessions,
                    claim_key(conversation_upload_id),
                    send,
                    what=WHAT,
                    context={
                        "organization_id": organization_id,
                        "conversation_upload_id": conversation_upload_id,
                        "sync_run_id": sync_run_id,
                    },
                )
            if self.native and self.effects is not None:
                done = self.effects.run(
                    self.native, organization_id, conversation_upload_id, conversation_id
                )
                if DeliveryOutcome.UNCERTAIN.value in done.values():
                    outcome = DeliveryOutcome.UNCERTAIN
        except RecordMissing:
            self._mark(organization_id, conversation_upload_id, "the target conversation is gone")
            raise
        except Delay:
            raise
        except Unrecoverable as exc:
            self._fail(organization_id, conversation_upload_id, exc)
            raise
        except Exception as exc:
            if current_attempt(UPLOAD_RETRY).is_final:
                self._fail(organization_id, conversation_upload_id, exc)
            raise
        if outcome is not DeliveryOutcome.UNCERTAIN:
            self._mark(organization_id, conversation_upload_id, None)
        return outcome

    def _fail(self, organization_id: int, upload_id: int, exc: Exception) -> None:
        error_class = str(getattr(exc, "error_class", None) or type(exc).__name__)
        report_exception(
            exc,
            fingerprint=["ConversationUploads", "CompleteConversationSyncJob", error_class],
            tags={"organization_id": organization_id, "conversation_upload_id": upload_id},
        )
        self._mark(organization_id, upload_id, str(exc)[:2000])

    def _mark(self, organization_id: int, upload_id: int, error: str | None) -> None:
        """Best effort: the sync_completion row follows the job's outcome (completed when
        ``error`` is None); a failed mark is left for the reconciler, never a failed job."""
        now = utcnow()
        try:
            with session_scope(self.sessions) as session:
                if error is None:
                    ledger.mark_completed(
                        session, organization_id, upload_id, "sync_completion", now
                    )
                else:
                    ledger.mark_failed(
                        session, organization_id, upload_id, "sync_completion", error, now
                    )
                session.commit()
        except Exception as exc:
            warn(
                "conversation upload ledger sync_completion mark failed",
                fingerprint=["speedtier", "uploads", "ledger-sync-completion"],
                conversation_upload_id=upload_id,
                error=str(exc),
            )
