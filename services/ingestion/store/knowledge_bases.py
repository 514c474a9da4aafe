"""Knowledge bases: create, read, page through, and change their refresh schedule.

Deleting one (its documents with it) is :mod:`.deletions`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, or_, update
from sqlalchemy.orm import Session

from services.ingestion.store.names import checked_name
from services.ingestion.store.paging import keyset_page
from services.ingestion.url_sources import refresh_interval_seconds
from shared.db.base import utcnow
from shared.db.models.ingestion import REFRESH_SCHEDULES, KbDocument, KnowledgeBase
from shared.db.tenant import select_scoped
from shared.errors import RecordMissing


def _check_schedule(refresh_schedule: str | None) -> None:
    if refresh_schedule is not None and refresh_schedule not in REFRESH_SCHEDULES:
        raise ValueError(f"refresh_schedule must be one of {', '.join(REFRESH_SCHEDULES)}")


def create_knowledge_base(
    session: Session,
    *,
    organization_id: int,
    name: str,
    refresh_schedule: str | None = None,
    now: datetime | None = None,
) -> KnowledgeBase:
    """A new knowledge base (flushed, so it has its id).

    Raises:
      ValueError: a blank or over-long name, or an unknown ``refresh_schedule``.
    """
    _check_schedule(refresh_schedule)
    now = now or utcnow()
    base = KnowledgeBase(
        organization_id=organization_id,
        name=checked_name(name),
        refresh_schedule=refresh_schedule,
        created_at=now,
        updated_at=now,
    )
    session.add(base)
    session.flush()
    return base


def get_knowledge_base(
    session: Session, *, organization_id: int, knowledge_base_id: int, for_share: bool = False
) -> KnowledgeBase:
    """The live knowledge base. Raises RecordMissing (missing, deleted or another tenant's)."""
    statement = select_scoped(KnowledgeBase, organization_id=organization_id).where(
        KnowledgeBase.id == knowledge_base_id, KnowledgeBase.deleted_at.is_(None)
    )
    if for_share:
        statement = statement.with_for_update(read=True)
    base = session.execute(statement).scalar_one_or_none()
    if base is None:
        raise RecordMissing(f"knowledge base {knowledge_base_id} not found")
    return base


def list_knowledge_bases(
    session: Session, *, organization_id: int, limit: int = 100, after_id: int | None = None
) -> list[KnowledgeBase]:
    """Live knowledge bases by id, ``limit`` at a time after ``after_id`` (keyset pages)."""
    statement = select_scoped(KnowledgeBase, organization_id=organization_id).where(
        KnowledgeBase.deleted_at.is_(None)
    )
    return keyset_page(session, statement, KnowledgeBase.id, limit=limit, after_id=after_id)


def set_refresh_schedule(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    refresh_schedule: str | None,
    recrawl_interval_seconds: float,
    now: datetime | None = None,
) -> KnowledgeBase:
    """Change the base's refresh schedule; its URL documents' next refresh moves up when the
    new cadence is sooner than what they were waiting for (never later: a pending backoff
    is not cut short by choosing a slower schedule)."""
    _check_schedule(refresh_schedule)
    now = now or utcnow()
    base = get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    base.refresh_schedule = refresh_schedule
    base.updated_at = now
    interval = refresh_interval_seconds(refresh_schedule, recrawl_interval_seconds)
    sooner = func.coalesce(KbDocument.last_fetched_at, now) + timedelta(seconds=interval)
    session.execute(
        update(KbDocument)
        .where(
            KbDocument.organization_id == organization_id,
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.kind == "url",
            KbDocument.deleted_at.is_(None),
            KbDocument.refresh_failures == 0,
            or_(KbDocument.next_refresh_at.is_(None), KbDocument.next_refresh_at > sooner),
        )
        .values(next_refresh_at=sooner),
        execution_options={"synchronize_session": False},
    )
    return base


def refresh_interval_of(session: Session, document: KbDocument, recrawl_interval: float) -> float:
    """Seconds between two fetches of a URL document: its base's refresh schedule, or the
    recrawl interval when the base has none."""
    base = get_knowledge_base(
        session,
        organization_id=document.organization_id,
        knowledge_base_id=document.knowledge_base_id,
    )
    return refresh_interval_seconds(base.refresh_schedule, recrawl_interval)
