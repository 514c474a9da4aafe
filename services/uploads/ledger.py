"""The durable delivery ledger's SQL (``conversation_upload_deliveries``, Rails-owned).

| call | moves | when |
| --- | --- | --- |
| :func:`mark_accepted` | pending/sent/uncertain -> accepted | the job is in Redis |
| :func:`mark_completed` | open -> completed | the upload completed |
| :func:`mark_failed` | open -> failed, ``last_error`` | the upload failed for good |
| :func:`complete_row` | open -> completed | the reconciler saw the outcome |
| :func:`claim_replay` | open -> accepted, ``replay_count + 1`` | the reconciler re-adds |
| :func:`fail_row` | open -> failed, ``last_error`` | file/conversation gone, budget spent |

Every update names the state it expects, so a row another actor moved meanwhile is left
alone; :func:`claim_replay` also names ``replay_count`` (the seed's optimistic claim,
``UPDATE ... WHERE state = $old AND replay_count = $n``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from shared.db.models import ConversationUploadDelivery

OPEN_STATES = ("pending", "sent", "uncertain", "accepted")
#: Rows not moved for this long are the reconciler's (the seed's grace window).
RECONCILE_GRACE = timedelta(minutes=10)
#: Replays the reconciler makes before it fails a row.
REPLAY_BUDGET = 3
#: Rails' own rejections before a pending row is terminal.
RAILS_ATTEMPTS = 5

_D = ConversationUploadDelivery


@dataclass(frozen=True)
class OpenRow:
    id: int
    organization_id: int
    kind: str
    state: str
    replay_count: int
    conversation_upload_id: int
    conversation_id: int | None


def mark_accepted(
    session: Session, organization_id: int, upload_id: int, now: datetime, kind: str = "process"
) -> int:
    """The hand-off (``process`` or ``sync_completion``) is in Redis: its row is accepted
    (API2 owns it now)."""
    result = session.execute(
        update(_D)
        .where(
            _D.organization_id == organization_id,
            _D.conversation_upload_id == upload_id,
            _D.kind == kind,
            _D.state.in_(("pending", "sent", "uncertain")),
        )
        .values(state="accepted", owner="api2", accepted_at=now, updated_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def mark_completed(
    session: Session, organization_id: int, upload_id: int, kind: str, now: datetime
) -> int:
    result = session.execute(
        update(_D)
        .where(
            _D.organization_id == organization_id,
            _D.conversation_upload_id == upload_id,
            _D.kind == kind,
            _D.state.in_(OPEN_STATES),
        )
        .values(state="completed", completed_at=now, updated_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def mark_failed(
    session: Session, organization_id: int, upload_id: int, kind: str, error: str, now: datetime
) -> int:
    result = session.execute(
        update(_D)
        .where(
            _D.organization_id == organization_id,
            _D.conversation_upload_id == upload_id,
            _D.kind == kind,
            _D.state.in_(OPEN_STATES),
        )
        .values(state="failed", failed_at=now, last_error=error, updated_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def open_rows(session: Session, now: datetime, limit: int = 500) -> list[OpenRow]:
    """Rows in sent/uncertain/accepted unmoved for the grace window, and pending rows Rails
    parked whose ``next_attempt_at`` has passed (under Rails' attempt budget)."""
    stale = and_(
        _D.state.in_(("sent", "uncertain", "accepted")), _D.updated_at < now - RECONCILE_GRACE
    )
    parked = and_(
        _D.state == "pending",
        _D.next_attempt_at.is_not(None),
        _D.next_attempt_at <= now,
        _D.attempts < RAILS_ATTEMPTS,
    )
    rows = session.execute(
        select(
            _D.id,
            _D.organization_id,
            _D.kind,
            _D.state,
            _D.replay_count,
            _D.conversation_upload_id,
            _D.conversation_id,
        )
        .where(or_(stale, parked))
        .order_by(_D.updated_at, _D.id)
        .limit(limit)
    ).all()
    return [OpenRow(*row) for row in rows]


def _move(session: Session, row: OpenRow, now: datetime, **values: object) -> bool:
    result = session.execute(
        update(_D)
        .where(_D.id == row.id, _D.state == row.state, _D.replay_count == row.replay_count)
        .values(updated_at=now, **values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def complete_row(session: Session, row: OpenRow, now: datetime) -> bool:
    return _move(session, row, now, state="completed", completed_at=now)


def fail_row(session: Session, row: OpenRow, error: str, now: datetime) -> bool:
    return _move(session, row, now, state="failed", failed_at=now, last_error=error)


def claim_replay(session: Session, row: OpenRow, now: datetime) -> bool:
    """The optimistic claim: only one reconciler wins a given (state, replay_count)."""
    return _move(
        session,
        row,
        now,
        state="accepted",
        owner="api2",
        replay_count=row.replay_count + 1,
        accepted_at=now,
    )


def note_error(session: Session, row_id: int, error: str, now: datetime) -> None:
    session.execute(update(_D).where(_D.id == row_id).values(last_error=error, updated_at=now))
