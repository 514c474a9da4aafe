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

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router, enqueue_settled
from router.ticks import Tick
from services.ingestion.families import PAUSE_FLAG, ingest_request, refresh_request
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models.ingestion import KbDocument

log = logging.getLogger(__name__)

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


def sweep_processing(session: Session, router: Router, bounds: SweepBounds) -> dict[str, int]:
    """Enqueue the processing documents one tick takes; returns the enqueue summary."""
    due = documents_to_ingest(session, limit=bounds.limit, tenant_slice=bounds.tenant_slice)
    requests = [ingest_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]
    return enqueue_settled(router, requests).summary()


def sweep_refresh(
    session: Session, router: Router, bounds: SweepBounds, recrawl_interval_seconds: float
) -> dict[str, int]:
    """Enqueue the re-fetch of URL documents due for it; returns the enqueue summary."""
    due = documents_to_refresh(
        session,
        now=utcnow(),
        recrawl_interval_seconds=recrawl_interval_seconds,
        limit=bounds.limit,
        tenant_slice=bounds.tenant_slice,
    )
    requests = [refresh_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]
    return enqueue_settled(router, requests).summary()


def ingestion_sweep_tick(
    sessions: sessionmaker[Session], router: Router, bounds: SweepBounds
) -> Tick:
    def run(slot: str) -> dict[str, int]:
        with session_scope(sessions) as session:
            summary = sweep_processing(session, router, bounds)
        log.info("ingestion sweep %s: %s", slot, summary)
        return summary

    return Tick(
        name="ingestion-sweep",
        cron="* * * * *",
        run=run,
        pause_flag=PAUSE_FLAG,
        description="enqueue documents in processing, oldest first, bounded per tick and tenant",
    )


def ingestion_refresh_tick(
    sessions: sessionmaker[Session],
    router: Router,
    bounds: SweepBounds,
    recrawl_interval_seconds: float,
) -> Tick:
    def run(slot: str) -> dict[str, int]:
        with session_scope(sessions) as session:
            summary = sweep_refresh(session, router, bounds, recrawl_interval_seconds)
        log.info("ingestion refresh %s: %s", slot, summary)
        return summary

    return Tick(
        name="ingestion-refresh",
        cron="*/5 * * * *",
        run=run,
        pause_flag=PAUSE_FLAG,
        description="re-fetch URL documents whose recrawl interval or refresh schedule is due",
    )
