"""``reconcileConversationUploadDeliveries``: the ledger rows nobody moved, settled inside
the 30-minute tick. Per row, in the seed's order:

1. business outcome from the Rails tables: a ``process`` row whose upload is completed, a
   ``sync_completion`` row whose conversation has ``last_synced_at``: completed (no Redis);
2. a live deterministic job (``conversation-upload-process-<id>`` waiting, parked, delayed or
   active): wait;
3. the file (process) or the conversation (sync_completion) is gone, the upload failed or
   expired (the periodic retry may reprocess it; Rails' ``record!`` reopens the row), or
   ``replay_count >= 3``: failed with ``last_error``;
4. otherwise the optimistic claim and the job re-added (a finished job of the same id is
   replaced). A ``sync_completion`` row waits while its upload is pending/processing (Rails'
   processor owns it), fails when the upload failed or expired, and is replayed only once
   its upload completed: ``provider_conversation_sync_completion_xcally-upload-<id>`` is
   re-added replacing its finished record (the family keeps finished ids for 7 days, so the
   replay drops that option for this one message). A replay whose claim was left uncertain
   sends nothing again (the claim stays for an operator) and spends the budget.

The rows looked at are those in sent/uncertain/accepted unmoved for the grace window, the
``pending`` rows API2 owns unmoved as long (a native pass's hand-off that died between its
commit and its enqueue, :mod:`services.uploads.handoff`), and the pending rows Rails parked.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.uploads import ledger
from services.uploads.families import completion_job_id, process_request
from services.uploads.handoff import replace_completion_job
from services.uploads.store import stored_file
from shared.db.engine import session_scope
from shared.db.models import Conversation, ConversationUpload
from shared.errors import QueueUnavailable, ValidationFailed
from tiers.job_store import LIVE_STATES

log = logging.getLogger(__name__)


def _upload_status(session: Session, row: ledger.OpenRow) -> str | None:
    return session.execute(
        select(ConversationUpload.status).where(
            ConversationUpload.organization_id == row.organization_id,
            ConversationUpload.id == row.conversation_upload_id,
        )
    ).scalar()


def _decide(session: Session, row: ledger.OpenRow, job_state: Callable[[str], str | None]) -> str:
    """What to do with one row: completed, wait, failed:<reason>, replay or unreplayable."""
    status = _upload_status(session, row)
    if row.kind == "process":
        if status == "completed":
            return "completed"
        if job_state(f"conversation-upload-process-{row.conversation_upload_id}") in LIVE_STATES:
            return "wait"
        if status is None or stored_file(session, row.conversation_upload_id) is None:
            return "failed:the upload's file is gone"
        if status in ("failed", "expired"):
            return f"failed:the upload {status}"
    else:
        synced = session.execute(
            select(Conversation.last_synced_at).where(
                Conversation.organization_id == row.organization_id,
                Conversation.id == row.conversation_id,
            )
        ).first()
        if synced is None:
            return "failed:the target conversation is gone"
        if synced[0] is not None:
            return "completed"
        if status in ("pending", "processing"):
            return "wait"
        if job_state(completion_job_id(row.conversation_upload_id)) in LIVE_STATES:
            return "wait"
        if status != "completed":
            return f"failed:the upload is {status or 'gone'}"
    if row.replay_count >= ledger.REPLAY_BUDGET:
        return f"failed:replay budget of {ledger.REPLAY_BUDGET} exhausted"
    if row.kind == "sync_completion" and row.conversation_id is None:
        return "unreplayable"
    return "replay"


def reconcile(
    sessions: sessionmaker[Session],
    router: Router,
    job_state: Callable[[str], str | None],
    now: datetime,
) -> dict[str, int]:
    """Settle every open row once; the counts by what was done."""
    counts: Counter[str] = Counter()
    with session_scope(sessions) as session:
        rows = ledger.open_rows(session, now)
    for row in rows:
        with session_scope(sessions) as session:
            decision = _decide(session, row, job_state)
            if decision == "completed":
                moved = ledger.complete_row(session, row, now)
            elif decision.startswith("failed:"):
                moved = ledger.fail_row(session, row, decision.removeprefix("failed:"), now)
            elif decision == "replay":
                moved = ledger.claim_replay(session, row, now)
            else:
                counts[decision] += 1
                continue
            session.commit()
        if not moved:
            counts["lost_race"] += 1
            continue
        counts["failed" if decision.startswith("failed:") else decision] += 1
        if decision == "replay":
            _readd(sessions, router, row, now, counts)
    return dict(counts)


def _readd(
    sessions: sessionmaker[Session],
    router: Router,
    row: ledger.OpenRow,
    now: datetime,
    counts: Counter[str],
) -> None:
    try:
        if row.kind == "process":
            router.enqueue(process_request(row.organization_id, row.conversation_upload_id))
        else:
            replace_completion_job(
                router,
                row.organization_id,
                row.conversation_upload_id,
                int(row.conversation_id or 0),
            )
    except (QueueUnavailable, ValidationFailed) as exc:
        # The claim stands (the budget is spent); the row stays accepted and the next
        # tick, ten minutes of grace later, finds it again.
        counts["enqueue_failed"] += 1
        log.warning("ledger row %s: re-add failed: %s", row.id, exc)
        with session_scope(sessions) as session:
            ledger.note_error(session, row.id, f"re-add failed: {exc}", now)
            session.commit()
