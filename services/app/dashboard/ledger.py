"""The delivery ledger's rows in flight (``conversation_upload_deliveries``, Rails-owned):
read-only, since moving a row is the uploads reconciler's job (``services.uploads``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.ledger import OPEN_STATES, RECONCILE_GRACE
from shared.db.engine import session_scope
from shared.db.models import ConversationUploadDelivery

_D = ConversationUploadDelivery


@dataclass(frozen=True)
class LedgerGroup:
    kind: str
    state: str
    owner: str
    rows: int
    oldest_update: datetime


@dataclass(frozen=True)
class LedgerRow:
    id: int
    organization_id: int
    kind: str
    state: str
    owner: str
    attempts: int
    replay_count: int
    updated_at: datetime
    last_error: str | None


def in_flight(
    sessions: sessionmaker[Session], limit: int = 50
) -> tuple[list[LedgerGroup], list[LedgerRow]]:
    """Open rows counted by (kind, state, owner), and the ``limit`` least recently moved."""
    with session_scope(sessions) as session:
        groups = session.execute(
            select(_D.kind, _D.state, _D.owner, func.count(), func.min(_D.updated_at))
            .where(_D.state.in_(OPEN_STATES))
            .group_by(_D.kind, _D.state, _D.owner)
            .order_by(_D.kind, _D.state, _D.owner)
        ).all()
        rows = session.execute(
            select(
                _D.id,
                _D.organization_id,
                _D.kind,
                _D.state,
                _D.owner,
                _D.attempts,
                _D.replay_count,
                _D.updated_at,
                _D.last_error,
            )
            .where(_D.state.in_(OPEN_STATES))
            .order_by(_D.updated_at, _D.id)
            .limit(limit)
        ).all()
    return [LedgerGroup(*g) for g in groups], [LedgerRow(*r) for r in rows]


GRACE_SECONDS = RECONCILE_GRACE.total_seconds()
