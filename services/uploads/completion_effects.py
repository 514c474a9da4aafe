"""The completion effects of a provider sync, and the ones this side performs itself
(``PROVIDER_SYNC_NATIVE_EFFECTS``, seed 001: "the upload-driven completion job claims the same
native completion steps as provider syncs and skips the Rails complete call when all
completion keys are native; the rollback is the shorter PROVIDER_SYNC_NATIVE_EFFECTS list").

| effect | what Rails' ``complete_conversation_sync`` is taken to do | done here as |
| --- | --- | --- |
| ``summarize`` | ``Conversation#summarize_later`` | ``conversation-summary-<id>`` enqueued |
| ``mark_synced`` | ``conversations.last_synced_at`` set | that update, in one transaction |
|                 |                                      | with its claim                   |

Each native effect is claimed in ``outbound_delivery_claims`` under
``conversation-upload/sync-completion/<upload id>/<effect>`` before it runs, so a replay (a
retried job, the reconciler, a re-drive after rollback) never performs it twice:

| effect | claim | a replay |
| --- | --- | --- |
| ``mark_synced`` | written delivered in the same transaction as the update | does nothing |
| ``summarize`` | :func:`~services.rails.delivery_claims.deliver_once` around the enqueue | does |
|  | (Redis refusing the job releases it: the deterministic id makes a resend safe) | nothing |

The list of effects is this project's reading of ``complete_conversation_sync``: Rails may do
more. The Rails call carries ``native_effects`` so Rails can skip them; until Rails' own
list is confirmed, keep at least one effect on Rails so its call still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from router.requests import JobRequest
from services.rails.delivery_claims import (
    DeliveryOutcome,
    NotDelivered,
    claim_delivered_in,
    deliver_once,
)
from services.uploads.errors import UploadProcessingRetryable
from shared.config import InvalidSettings
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import QueueUnavailable, RecordMissing

SUMMARIZE = "summarize"
MARK_SYNCED = "mark_synced"
#: Every completion key, in the order they run (the sync mark last: it is what the
#: reconciler and the validation queries read as "completion finished").
COMPLETION_EFFECTS = (SUMMARIZE, MARK_SYNCED)
#: The summary family's kind (registered by the maintenance product; reached through the
#: router by kind, so no product imports another).
SUMMARY_KIND = "summarize_conversation"

_MARK_SYNCED = text(
    "UPDATE conversations SET last_synced_at = :now, updated_at = :now"
    " WHERE id = :conversation_id AND organization_id = :organization_id"
)


def effect_key(upload_id: int, effect: str) -> str:
    return f"conversation-upload/sync-completion/{upload_id}/{effect}"


def native_effects(configured: tuple[str, ...]) -> tuple[str, ...]:
    """The configured effects in the run order.

    Raises:
      InvalidSettings: a name that is not a completion effect.
    """
    unknown = [name for name in configured if name not in COMPLETION_EFFECTS]
    if unknown:
        raise InvalidSettings(
            f"PROVIDER_SYNC_NATIVE_EFFECTS: unknown effect(s) {', '.join(unknown)};"
            f" known: {', '.join(COMPLETION_EFFECTS)}"
        )
    return tuple(name for name in COMPLETION_EFFECTS if name in configured)


@dataclass(frozen=True)
class NativeEffects:
    """Runs the native completion effects of one upload-driven completion.

    Parameters:
      sessions: sessions on the Rails database (claims and conversations).
      enqueue: puts a job request on the queues (the router's ``enqueue``).
    """

    sessions: sessionmaker[Session]
    enqueue: Callable[[JobRequest], object]

    def run(
        self, effects: tuple[str, ...], organization_id: int, upload_id: int, conversation_id: int
    ) -> dict[str, str]:
        """Each of ``effects`` once per upload; effect -> ``sent`` / ``already_sent`` /
        ``uncertain``.

        Raises:
          RecordMissing: the conversation is gone (nothing claimed).
          UploadProcessingRetryable: Redis refused the summary job (claim released).
        """
        done: dict[str, str] = {}
        for effect in effects:
            key = effect_key(upload_id, effect)
            if effect == MARK_SYNCED:
                done[effect] = self._mark_synced(key, organization_id, conversation_id).value
            else:
                done[effect] = self._summarize(key, organization_id, conversation_id).value
        return done

    def _mark_synced(self, key: str, organization_id: int, conversation_id: int) -> DeliveryOutcome:
        with session_scope(self.sessions) as session:
            if not claim_delivered_in(session, key):
                return DeliveryOutcome.ALREADY_SENT
            updated = session.execute(
                _MARK_SYNCED,
                {
                    "now": utcnow().replace(tzinfo=None),
                    "conversation_id": conversation_id,
                    "organization_id": organization_id,
                },
            )
            if not updated.rowcount:  # type: ignore[attr-defined]
                raise RecordMissing(f"conversation {conversation_id}")  # rolls the claim back
            session.commit()
        return DeliveryOutcome.SENT

    def _summarize(self, key: str, organization_id: int, conversation_id: int) -> DeliveryOutcome:
        def send() -> None:
            try:
                self.enqueue(
                    JobRequest(SUMMARY_KIND, organization_id, {"conversation_id": conversation_id})
                )
            except QueueUnavailable as exc:
                failure = UploadProcessingRetryable("EnqueueFailed", f"summary: {exc}")
                raise NotDelivered(str(exc), outcome=failure) from exc

        return deliver_once(
            self.sessions,
            key,
            send,
            what="provider sync completion summary",
            context={"organization_id": organization_id, "conversation_id": conversation_id},
        )
