"""Ingestion's ticks: they only select and enqueue.

``ingestion-sweep`` (every minute) enqueues documents in ``processing``, oldest submission
first, a bounded number per tick and per tenant. Uploads are also enqueued by the API
right away; the sweep is what makes that optional: a lost enqueue, a rolling restart or a
retry that ran out all leave the document in ``processing``, and the next sweep finds it.
An id already queued or running is a no-op, so sweeping a queued document costs nothing.

``ingestion-refresh`` (every five minutes) enqueues the re-fetch of URL documents whose
recrawl interval or base refresh schedule is due, and the sync of connector bindings whose
next sync is due (their base's schedule, the recrawl interval, or a failure's backoff; a
single-item binding's sync is its document's scheduled refresh).

The queries import the store (and with it the ORM models) when a tick runs: a worker
registers these ticks without loading the models (``router.deferred``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from router.enqueue import Router, enqueue_settled
from router.requests import JobRequest
from router.ticks import Tick, enqueue_tick
from services.ingestion.families import (
    PAUSE_FLAG,
    ingest_request,
    refresh_request,
    sync_request,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

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


def ingest_requests(session: Session, bounds: SweepBounds) -> list[JobRequest]:
    """The ingestion of the processing documents one sweep takes."""
    from services.ingestion.store import documents_to_ingest

    due = documents_to_ingest(session, limit=bounds.limit, tenant_slice=bounds.tenant_slice)
    return [ingest_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]


def refresh_requests(
    session: Session, bounds: SweepBounds, recrawl_interval_seconds: float
) -> list[JobRequest]:
    """The re-fetch of the URL documents due for it that one refresh tick takes."""
    from services.ingestion.store import documents_to_refresh
    from shared.db.base import utcnow

    due = documents_to_refresh(
        session,
        now=utcnow(),
        recrawl_interval_seconds=recrawl_interval_seconds,
        limit=bounds.limit,
        tenant_slice=bounds.tenant_slice,
    )
    return [refresh_request(d.organization_id, d.document_id, d.knowledge_base_id) for d in due]


def connector_sync_requests(session: Session, bounds: SweepBounds) -> list[JobRequest]:
    """The syncs of the connector bindings due for one, that one refresh tick takes."""
    from services.ingestion.store import bindings_to_sync
    from shared.db.base import utcnow

    due = bindings_to_sync(
        session, now=utcnow(), limit=bounds.limit, tenant_slice=bounds.tenant_slice
    )
    return [
        sync_request(d.organization_id, d.binding_id, d.connection_id, d.provider, scheduled=True)
        for d in due
    ]


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
        description="re-fetch URL documents and sync connector bindings whose recrawl "
        "interval or refresh schedule is due",
        pause_flag=PAUSE_FLAG,
        sessions=sessions,
        router=router,
        due=lambda session: (
            refresh_requests(session, bounds, recrawl_interval_seconds)
            + connector_sync_requests(session, bounds)
        ),
    )
