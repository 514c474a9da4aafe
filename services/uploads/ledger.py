"""The durable delivery ledger's SQL (``conversation_upload_deliveries``, Rails-owned).

| call | moves | when |
| --- | --- | --- |
| :func:`record_sync_completion` | new -> pending (owner api2); failed -> pending | a native pass |
| :func:`mark_accepted` | pending/sent/uncertain -> accepted | the job is in Redis |
| :func:`mark_uncertain` | pending -> uncertain, ``last_error`` | a hand-off's enqueue failed |
| :func:`mark_completed` | open -> completed | the upload completed |
| :func:`mark_failed` | open -> failed, ``last_error`` | the upload failed for good |
| :func:`complete_row` | open -> completed | the reconciler saw the outcome |
| :func:`claim_replay` | open -> accepted, ``replay_count + 1`` | the reconciler re-adds |
| :func:`fail_row` | open -> failed, ``last_error`` | file/conversation gone, budget spent |
| :func:`resolve` | any but completed -> completed or accepted | an operator resolved a claim |

Every update names the state it expects, so a row another actor moved meanwhile is left
alone; :func:`claim_replay` also names ``replay_count`` (the seed's optimistic claim,
``UPDATE ... WHERE state = $old AND replay_count = $n``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.dialects.postgresql import insert
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


def record_sync_completion(
    session: Session, organization_id: int, upload_id: int, conversation_id: int, now: datetime
) -> bool:
    """The native pass's ``sync_completion`` row (``sync_run_id = xcally-upload-<id>``),
    inserted pending and owned by API2, or reopened when it had failed (Rails'
    ``ConversationUploadDelivery.record!``); an open or completed row is left alone.

    Returns whether a row was inserted or reopened (the caller's transaction commits it).
    """
    statement = insert(_D).values(
        organization_id=organization_id,
        conversation_upload_id=upload_id,
        conversation_id=conversation_id,
        kind="sync_completion",
        delivery_key=f"conversation-upload/sync-completion/{upload_id}",
        sync_run_id=f"xcally-upload-{upload_id}",
        state="pending",
        owner="api2",
        attempts=0,
        replay_count=0,
        created_at=now,
        updated_at=now,
    )
    reopen = statement.on_conflict_do_update(
        index_elements=[_D.conversation_upload_id, _D.kind],
        set_={
            "state": "pending",
            "owner": "api2",
            "conversation_id": conversation_id,
            "attempts": 0,
            "replay_count": 0,
            "next_attempt_at": None,
            "last_error": None,
            "failed_at": None,
            "updated_at": now,
        },
        where=(_D.state == "failed") & (_D.organization_id == organization_id),
    )
    return bool(session.execute(reopen).rowcount)  # type: ignore[attr-defined]


def mark_uncertain(
    session: Session, organization_id: int, upload_id: int, kind: str, error: str, now: datetime
) -> int:
    """The hand-off's enqueue failed: a ``pending`` row becomes ``uncertain`` (the job may
    or may not be in Redis; the reconciler settles it)."""
    result = session.execute(
        update(_D)
        .where(
            _D.organization_id == organization_id,
            _D.conversation_upload_id == upload_id,
            _D.kind == kind,
            _D.state == "pending",
        )
        .values(state="uncertain", last_error=error, last_attempted_at=now, updated_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


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
    """Rows in sent/uncertain/accepted unmoved for the grace window, pending rows API2 owns
    unmoved as long (a native pass that died between its commit and its enqueue), and
    pending rows Rails parked whose ``next_attempt_at`` has passed (under Rails' attempt
    budget)."""
    stale = and_(
        or_(
            _D.state.in_(("sent", "uncertain", "accepted")),
            and_(_D.state == "pending", _D.owner == "api2"),
        ),
        _D.updated_at < now - RECONCILE_GRACE,
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


def resolve(
    session: Session, organization_id: int, upload_id: int, kind: str, state: str, now: datetime
) -> int:
    """An operator's resolution: the row becomes ``completed`` (the delivery landed) or
    ``accepted`` by API2 (the job was re-added), from any state but ``completed``."""
    assert state in ("completed", "accepted")
    stamp = {"completed_at": now} if state == "completed" else {"accepted_at": now}
    result = session.execute(
        update(_D)
        .where(
            _D.organization_id == organization_id,
            _D.conversation_upload_id == upload_id,
            _D.kind == kind,
            _D.state != "completed",
        )
        .values(state=state, owner="api2", failed_at=None, last_error=None, updated_at=now, **stamp)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
