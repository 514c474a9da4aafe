"""Resolving an uncertain XCALLY completion by hand (seed 001, "Resolving uncertain delivery
claims"): what ``speedtier uploads resolve-completion <upload id>`` finds and does.

Two claims in ``outbound_delivery_claims`` can be left unresolved for one upload:

| claim | whose send | it landed when |
| --- | --- | --- |
| ``conversation-upload/sync-completion/<id>`` | Rails' hand-off | the pinned job exists or ran |
| ``.../<id>/complete_conversation_sync`` | the job's Rails call | Rails says so (synced) |

The pinned job is ``provider_conversation_sync_completion_xcally-upload-<id>`` (its finished
record is kept 7 days; a call claim also proves it ran). What the command does:

| finding | no option | ``--mark-delivered`` | ``--release`` |
| --- | --- | --- | --- |
| the job waiting/parked/delayed/active | refuse: let it finish | refuse | refuse |
| no unresolved claim | refuse: nothing to do | refuse | refuse (3) |
| hand-off claim open, the job exists/ran | mark delivered | mark delivered | refuse (1) |
| hand-off claim open, no job | release, re-drive | refuse | release, re-drive |
| call claim open, ``last_synced_at`` set | mark delivered (2) | mark delivered (2) | refuse |
| call claim open, not synced | refuse: choose | mark delivered (2) | release, re-drive |

(1) unless the call claim is open too (``--release`` is then about the call);
(2) and the ``sync_completion`` row completed; (3) except when there is no call claim and
the conversation is not synced (a re-drive Redis refused, a claim released by hand): then
re-drive.

Re-drive: the ``sync_completion`` row ``accepted`` by API2, then the job re-added replacing
its finished record (:func:`~services.uploads.handoff.replace_completion_job`); the job's
next run claims and sends again. It needs the upload completed (otherwise its processor
still owns the hand-off) and ``api2_conversation_upload_sync_completion`` on (otherwise the
job would skip). Every refusal is decided before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.rails import delivery_claims
from services.rails.delivery_claims import Claim
from services.uploads import ledger
from services.uploads.completion import claim_key
from services.uploads.families import completion_job_id
from services.uploads.handoff import dispatch_key, replace_completion_job
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import Conversation, ConversationUpload, ConversationUploadDelivery
from shared.errors import SpeedtierError
from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION
from tiers.job_store import LIVE_STATES

MARK_DELIVERED = "mark-delivered"
RELEASE = "release"


class Refused(SpeedtierError):
    """The state does not allow the resolution asked for; nothing was written."""


@dataclass(frozen=True)
class Findings:
    """What the command looked at."""

    organization_id: int
    upload_id: int
    upload_status: str
    conversation_id: int | None
    last_synced_at: datetime | None
    row_state: str | None
    row_replays: int
    row_error: str | None
    job_state: str | None
    dispatch_claim: Claim | None
    call_claim: Claim | None

    @property
    def job_id(self) -> str:
        return completion_job_id(self.upload_id)


def upload_organization(session: Session, upload_id: int) -> int | None:
    """The organization of an upload an operator names by id (the one unscoped read)."""
    return session.execute(
        select(ConversationUpload.organization_id).where(ConversationUpload.id == upload_id)
    ).scalar()


def inspect(
    sessions: sessionmaker[Session], organization_id: int, upload_id: int, job_state: str | None
) -> Findings:
    """The upload, its ``sync_completion`` row, its conversation and both claims."""
    with session_scope(sessions) as session:
        upload = session.execute(
            select(ConversationUpload.status, ConversationUpload.conversation_id).where(
                ConversationUpload.organization_id == organization_id,
                ConversationUpload.id == upload_id,
            )
        ).one()
        row = session.execute(
            select(
                ConversationUploadDelivery.state,
                ConversationUploadDelivery.replay_count,
                ConversationUploadDelivery.last_error,
                ConversationUploadDelivery.conversation_id,
            ).where(
                ConversationUploadDelivery.organization_id == organization_id,
                ConversationUploadDelivery.conversation_upload_id == upload_id,
                ConversationUploadDelivery.kind == "sync_completion",
            )
        ).first()
        conversation_id = upload.conversation_id or (row.conversation_id if row else None)
        synced = session.execute(
            select(Conversation.last_synced_at).where(
                Conversation.organization_id == organization_id,
                Conversation.id == conversation_id,
            )
        ).scalar()
    return Findings(
        organization_id=organization_id,
        upload_id=upload_id,
        upload_status=upload.status,
        conversation_id=conversation_id,
        last_synced_at=synced,
        row_state=row.state if row else None,
        row_replays=row.replay_count if row else 0,
        row_error=row.last_error if row else None,
        job_state=job_state,
        dispatch_claim=delivery_claims.find(sessions, dispatch_key(upload_id)),
        call_claim=delivery_claims.find(sessions, claim_key(upload_id)),
    )


def _open(claim: Claim | None) -> bool:
    return claim is not None and not claim.resolved


#: One step of a resolution: (``mark`` | ``release``, claim key), (``row``, state) or
#: (``re-add``, job id).
Step = tuple[str, str]


def plan(found: Findings, choice: str | None, completion_enabled: bool) -> list[Step]:
    """The steps the resolution takes, in order.

    Raises:
      Refused: the state does not allow it (the message says why and what to do).
    """
    if found.job_state in LIVE_STATES:
        raise Refused(f"{found.job_id} is {found.job_state}: let it finish, then run this again")
    dispatch_open, call_open = _open(found.dispatch_claim), _open(found.call_claim)
    # no call claim (never sent, or released) and no sync: re-adding cannot complete twice
    unsent = found.call_claim is None and found.last_synced_at is None
    if not dispatch_open and not call_open and not (choice == RELEASE and unsent):
        raise Refused(f"nothing to resolve: upload {found.upload_id} has no unresolved claim")
    steps: list[Step] = []
    hand_off, call = dispatch_key(found.upload_id), claim_key(found.upload_id)
    redrive = not dispatch_open and not call_open
    if dispatch_open:
        if found.job_state is not None or found.call_claim is not None:
            if choice == RELEASE and not call_open:
                raise Refused(
                    f"the hand-off landed ({found.job_id} is {found.job_state or 'ran'}):"
                    f" use --{MARK_DELIVERED} or no option"
                )
            steps.append(("mark", hand_off))
        elif choice == MARK_DELIVERED:
            raise Refused(
                f"the hand-off did not land ({found.job_id} neither exists nor ran):"
                f" use --{RELEASE} or no option"
            )
        else:
            steps.append(("release", hand_off))
            redrive = True
    if call_open:
        synced = found.last_synced_at is not None
        decided = choice or (MARK_DELIVERED if synced else None)
        if decided is None:
            raise Refused(
                f"complete_conversation_sync's outcome is uncertain (conversation"
                f" {found.conversation_id} has no last_synced_at): check it in Rails, then run"
                f" again with --{MARK_DELIVERED} (it landed) or --{RELEASE} (it did not)"
            )
        if decided == RELEASE and synced:
            raise Refused(
                f"conversation {found.conversation_id} was synced at {found.last_synced_at}:"
                f" complete_conversation_sync landed; use --{MARK_DELIVERED}"
            )
        if decided == MARK_DELIVERED:
            steps += [("mark", call), ("row", "completed")]
        else:
            steps.append(("release", call))
            redrive = True
    if redrive:
        if found.upload_status != "completed" or found.conversation_id is None:
            raise Refused(
                f"upload {found.upload_id} is {found.upload_status}: its processor hands the"
                " completion off once it completes"
            )
        if not completion_enabled:
            raise Refused(
                f"{CONVERSATION_UPLOAD_SYNC_COMPLETION} is off for organization"
                f" {found.organization_id}: a re-added job would skip"
            )
        steps += [("row", "accepted"), ("re-add", found.job_id)]
    return steps


def apply(
    sessions: sessionmaker[Session], router: Router, found: Findings, steps: list[Step]
) -> list[str]:
    """Take the planned steps; a line per thing done.

    Raises:
      QueueUnavailable: Redis did not take the re-added job (the claims are resolved and the
        row is accepted, so the reconciler re-adds it after its grace window).
    """
    done: list[str] = []
    for verb, subject in steps:
        if verb == "mark":
            if delivery_claims.mark_delivered(sessions, subject):
                done.append(f"marked delivered: {subject}")
        elif verb == "release":
            if delivery_claims.release(sessions, subject):
                done.append(f"released: {subject}")
        elif verb == "row":
            with session_scope(sessions) as session:
                moved = ledger.resolve(
                    session,
                    found.organization_id,
                    found.upload_id,
                    "sync_completion",
                    subject,
                    utcnow(),
                )
                session.commit()
            if moved:
                done.append(f"ledger sync_completion: {found.row_state} -> {subject}")
        else:
            outcome = replace_completion_job(
                router, found.organization_id, found.upload_id, int(found.conversation_id or 0)
            )
            done.append(f"re-added {subject} ({outcome})")
    return done


def describe(found: Findings) -> list[str]:
    """The findings, a line each."""

    def claim_line(label: str, key: str, claim: Claim | None) -> str:
        if claim is None:
            return f"claim {key} ({label}): none"
        if claim.resolved:
            return f"claim {key} ({label}): delivered {claim.delivered_at:%Y-%m-%dT%H:%M:%SZ}"
        return f"claim {key} ({label}): unresolved since {claim.created_at:%Y-%m-%dT%H:%M:%SZ}"

    synced = found.last_synced_at.strftime("%Y-%m-%dT%H:%M:%SZ") if found.last_synced_at else "-"
    row = (
        f"ledger sync_completion: {found.row_state}, {found.row_replays} replay(s),"
        f" last error: {found.row_error or '-'}"
        if found.row_state
        else "ledger sync_completion: no row"
    )
    return [
        f"upload {found.upload_id} (organization {found.organization_id}): {found.upload_status},"
        f" conversation {found.conversation_id or '-'}, last_synced_at {synced}",
        row,
        f"job {found.job_id}: {found.job_state or 'none'}",
        claim_line("Rails' hand-off", dispatch_key(found.upload_id), found.dispatch_claim),
        claim_line("the completion call", claim_key(found.upload_id), found.call_claim),
    ]
