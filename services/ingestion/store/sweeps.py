"""The cross-tenant selections the ingestion ticks enqueue from: documents due for an
ingestion pass or a re-fetch, fairly sliced across organizations (the only statements here
that are not scoped to one organization; each request they feed is)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from shared.db.models.ingestion import KbDocument, KnowledgeBase
from shared.db.models.kb_connectors import KbConnectorBinding


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
    failure), or, while they have no failure pending and their base has no refresh
    schedule, their last fetch is older than the recrawl interval (this also applies a
    recrawl interval shortened since). A base's schedule alone decides for its documents:
    the daily recrawl does not make a weekly base's documents due daily.
    """
    stale_before = now - timedelta(seconds=recrawl_interval_seconds)
    unscheduled = (
        select(KnowledgeBase.id)
        .where(
            KnowledgeBase.organization_id == KbDocument.organization_id,
            KnowledgeBase.id == KbDocument.knowledge_base_id,
            KnowledgeBase.refresh_schedule.is_(None),
        )
        .exists()
    )
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
                    KbDocument.next_refresh_at.is_(None),
                    unscheduled & (KbDocument.last_fetched_at <= stale_before),
                ),
            ),
        ],
        [func.coalesce(KbDocument.next_refresh_at, KbDocument.last_fetched_at), KbDocument.id],
        limit=limit,
        tenant_slice=tenant_slice,
    )


@dataclass(frozen=True)
class DueBinding:
    organization_id: int
    binding_id: int
    connection_id: int
    provider: str
    single_item: bool


def bindings_to_sync(
    session: Session, *, now: datetime, limit: int, tenant_slice: int
) -> list[DueBinding]:
    """Connector bindings of live bases whose next sync is due (their base's refresh
    schedule, the recrawl interval, or the backoff after a failure), most overdue first,
    ``limit`` in all and at most ``tenant_slice`` per organization."""
    ranked = (
        select(
            KbConnectorBinding.organization_id,
            KbConnectorBinding.id,
            KbConnectorBinding.connection_id,
            KbConnectorBinding.provider,
            KbConnectorBinding.item_id.is_not(None).label("single"),
            KbConnectorBinding.next_sync_at,
            func.row_number()
            .over(
                partition_by=KbConnectorBinding.organization_id,
                order_by=(KbConnectorBinding.next_sync_at, KbConnectorBinding.id),
            )
            .label("rank"),
        )
        .join(
            KnowledgeBase,
            (KnowledgeBase.organization_id == KbConnectorBinding.organization_id)
            & (KnowledgeBase.id == KbConnectorBinding.knowledge_base_id),
        )
        .where(KbConnectorBinding.next_sync_at <= now, KnowledgeBase.deleted_at.is_(None))
        .subquery()
    )
    rows = session.execute(
        select(
            ranked.c.organization_id,
            ranked.c.id,
            ranked.c.connection_id,
            ranked.c.provider,
            ranked.c.single,
        )
        .where(ranked.c.rank <= tenant_slice)
        .order_by(ranked.c.next_sync_at, ranked.c.id)
        .limit(limit)
    )
    return [
        DueBinding(org, ident, conn, provider, bool(single))
        for org, ident, conn, provider, single in rows
    ]
