"""The daily knowledge sync tick (01:00 UTC): re-scan every source and sweep documents that
have content but no chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.enqueue import Router
from router.requests import JobRequest
from router.ticks import Tick, enqueue_tick
from services.knowledge_sync.families import PAUSE_FLAG, document_request, source_request

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


def scan_requests(session: Session) -> list[JobRequest]:
    """Every live source but Intercom, then the recovery sweep's documents."""
    # Here, not at the top: its queries load the ORM models, which a worker registering
    # this tick does not need before the tick runs (router.deferred).
    from services.knowledge_sync import daily_scan

    requests = [
        source_request(org, source_id, source_type, ods)
        for org, source_id, source_type, ods in daily_scan.sources_to_scan(session)
    ]
    requests += [
        document_request("sync_document_chunks", org, document_id, None)
        for org, document_id, _type in daily_scan.documents_needing_chunks(session)
    ]
    return requests


def daily_sync_tick(sessions: sessionmaker[Session], router: Router) -> Tick:
    return enqueue_tick(
        name="kb-sync",
        cron="0 1 * * *",
        description="re-scan every knowledge source and sweep documents with content but no chunks",
        pause_flag=PAUSE_FLAG,
        sessions=sessions,
        router=router,
        due=scan_requests,
    )
