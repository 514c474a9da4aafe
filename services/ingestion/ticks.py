"""Ingestion's ticks: they only select and enqueue.

``ingestion-sweep`` (every minute) enqueues documents in ``processing``, oldest submission
first, a bounded number per tick and per tenant. Uploads are also enqueued by the API
right away; the sweep is what makes that optional: a lost enqueue, a rolling restart or a
retry that ran out all leave the document in ``processing``, and the next sweep finds it.
An id already queued or running is a no-op, so sweeping a queued document costs nothing.

``ingestion-refresh`` (every five minutes) enqueues the re-fetch of URL documents whose
recrawl interval or base refresh schedule is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router, enqueue_settled
from router.requests import JobRequest
from router.ticks import Tick, enqueue_tick
from services.ingestion.families import PAUSE_FLAG, ingest_request, refresh_request
from shared.db.base import utcnow
from shared.db.models.ingestion import KbDocument

DEFAULT_TICK_LIMIT = 200
DEFAULT_TENANT_SLICE = 20


@dataclass(frozen=True)
class SweepBounds:
    """How much one tick enqueues: ``limit`` documents in all, ``tenant_slice`` per tenant."""

    limit: int = DEFAULT_TICK_LIMIT
    tenant_slice: int = DEFAULT_TENANT_SLICE

    def __post_init__(self) -> None:
        if self.limit < 1 or self.tenant_slice < 1:
            raise ValueError("a sweep needs a positive limit and tenant slice")


@dataclass(frozen=True)
class DueDocument:
    organization_id: int
    knowledge_base_id: int
    document_id: int


def _fair_slice(
    session: Session, where: list[Any], order: list[Any], *, limit: int, tenant_slice: int
) -> list[DueDocument]:
    """The first ``limit`` rows by ``order`` across tenants, at most ``tenant_slice`` each."""
    ranked = (
        select(
            KbDocument.organization_id,
            KbDocument.knowledge_base_id,
            KbDocument.id,
            func.row_number()
            .over(partition_by=KbDocument.organization_id, order_by=order)
            .label("rank"),
            *[column.label(f"o{i}") for i, column in enumerate(order)],
        )
        .where(*where)
        .subquery()
    )
    rows = session.execute(
        select(ranked.c.organization_id, ranked.c.knowledge_base_id, ranked.c.id)
        .where(ranked.c.rank <= tenant_slice)
        .order_by(*[ranked.c[f"o{i}"] for i in range(len(order))])
        .limit(limit)
    )
    return [DueDocument(org, base, document) for org, base, document in rows]


def documents_to_ingest(session: Session, *, limit: int, tenant_slice: int) -> list[DueDocument]:
    """Documents in ``processing``, oldest submission first, ``limit`` in all and at most
    ``tenant_slice`` per organization (a bulk import cannot crowd out other tenants)."""
    return _fair_slice(
        session,
        [KbDocument.status == "processing", KbDocument.deleted_at.is_(None)],
        [KbDocument.submitted_at, KbDocument.id],
        limit=limit,
        tenant_slice=tenant_slice,
    )


def documents_to_refresh(
    session: Session,
    *,
    now: datetime,
    recrawl_interval_seconds: float,
    limit: int,
    tenant_slice: int,
) -> list[DueDocument]:
    """Ready URL documents due for a re-fetch, most overdue first, fairly sliced.

    Due: their ``next_refresh_at`` has come (the base's schedule, or the backoff after a
    failure), or, while they have no failure pending, their last fetch is older than the
    recrawl interval (this also applies a recrawl interval shortened since).
    """
    stale_before = now - timedelta(seconds=recrawl_interval_seconds)
    return _fair_slice(
        session,
        [
            KbDocument.kind == "url",
            KbDocument.status == "ready",
            KbDocument.deleted_at.is_(None),
            or_(
                KbDocument.next_refresh_at <= now,
                (KbDocument.refresh_failures == 0)
                & or_(
                    KbDocument.last_fetched_at.is_(None),
                    KbDocument.last_fetched_at <= stale_before,
                ),
            ),
        ],
        [func.coalesce(KbDocument.next_refresh_at, KbDocument.last_fetched_at), KbDocument.id],
        limit=limit,
        tenant_slice=tenant_slice,
    )


def ingest_requests(session: Session, bounds: SweepBounds) -> list[JobRequest]:
    """The ingestion of the processing documents one sweep takes."""
    due = documents_to_ingest(session, limit=bounds.limit, tenant_slice=bounds.tenant_slice)
    return [ingest_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]


def refresh_requests(
    session: Session, bounds: SweepBounds, recrawl_interval_seconds: float
) -> list[JobRequest]:
    """The re-fetch of the URL documents due for it that one refresh tick takes."""
    due = documents_to_refresh(
        session,
        now=utcnow(),
        recrawl_interval_seconds=recrawl_interval_seconds,
        limit=bounds.limit,
        tenant_slice=bounds.tenant_slice,
    )
    return [refresh_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]


def sweep_processing(session: Session, router: Router, bounds: SweepBounds) -> dict[str, int]:
    """One sweep in the caller's session: enqueue the processing documents it takes;
    returns the enqueue summary."""
    return enqueue_settled(router, ingest_requests(session, bounds)).summary()


def ingestion_sweep_tick(
    sessions: sessionmaker[Session], router: Router, bounds: SweepBounds
) -> Tick:
    return enqueue_tick(
        name="ingestion-sweep",
        cron="* * * * *",
        description="enqueue documents in processing, oldest first, bounded per tick and tenant",
        pause_flag=PAUSE_FLAG,
        sessions=sessions,
        router=router,
        due=lambda session: ingest_requests(session, bounds),
    )


def ingestion_refresh_tick(
    sessions: sessionmaker[Session],
    router: Router,
    bounds: SweepBounds,
    recrawl_interval_seconds: float,
) -> Tick:
    return enqueue_tick(
        name="ingestion-refresh",
        cron="*/5 * * * *",
        description="re-fetch URL documents whose recrawl interval or refresh schedule is due",
        pause_flag=PAUSE_FLAG,
        sessions=sessions,
        router=router,
        due=lambda session: refresh_requests(session, bounds, recrawl_interval_seconds),
    )
