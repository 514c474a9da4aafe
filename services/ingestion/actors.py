"""Thin actor bodies: run the pipeline in its units of work; follow-ups are enqueued after
the commit (router.unit_of_work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.unit_of_work import unit_of_work
from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker
from services.indexing.ocr import DEFAULT_OCR_LIMITS, OcrLimits
from services.ingestion import ingestion_job, url_refresh
from services.ingestion.connector_sync.job import run_sync
from services.ingestion.connector_sync.sync import SyncContext
from services.ingestion.families import INGEST_RETRY, SYNC_RETRY, ingest_request
from services.web.feed_fetch import FeedFetch
from services.web.fetch import PageFetch
from shared.db.base import utcnow
from shared.errors import Unrecoverable
from tiers.attempts import current_attempt


@dataclass(frozen=True)
class IngestionContext:
    """What the jobs need besides a session: the chunk/embed component, a page fetcher
    (SSRF-guarded), the recrawl interval, the OCR bounds, the feed fetcher and the
    connector syncs' context."""

    chunker: DocumentChunker
    embedder: Embedder
    fetch: PageFetch
    recrawl_interval_seconds: float
    ocr: OcrLimits = DEFAULT_OCR_LIMITS
    fetch_feed: FeedFetch | None = None
    connectors: SyncContext | None = None


@dataclass(frozen=True)
class IngestionActors:
    """The three actor bodies, as methods bound to their dependencies."""

    sessions: sessionmaker[Session]
    router: Router
    ctx: IngestionContext

    def ingest_document(self, organization_id: int, document_id: int, **_routing: Any) -> None:
        attempt = current_attempt(INGEST_RETRY)
        ingestion_job.run_ingestion(
            self.sessions,
            organization_id=organization_id,
            document_id=document_id,
            chunker=self.ctx.chunker,
            embedder=self.ctx.embedder,
            final_attempt=attempt.is_final,
            now=utcnow(),
            fetch=self.ctx.fetch,
            recrawl_interval_seconds=self.ctx.recrawl_interval_seconds,
            ocr=self.ctx.ocr,
            fetch_feed=self.ctx.fetch_feed,
            delay_ends_job=attempt.delay_ends_job,
        )

    def refresh_document(self, organization_id: int, document_id: int, **_routing: Any) -> None:
        with unit_of_work(self.sessions, self.router) as uow:
            outcome = url_refresh.refresh_document(
                uow.session,
                organization_id=organization_id,
                document_id=document_id,
                fetch=self.ctx.fetch,
                now=utcnow(),
                recrawl_interval_seconds=self.ctx.recrawl_interval_seconds,
                fetch_feed=self.ctx.fetch_feed,
            )
            if outcome.result == "changed":  # a failed enqueue is swept later
                uow.enqueue(ingest_request(organization_id, document_id))
            uow.commit()

    def sync_connector(
        self,
        organization_id: int,
        binding_id: int,
        full: bool = False,
        scheduled: bool = False,
        **_routing: Any,
    ) -> None:
        if self.ctx.connectors is None:
            raise Unrecoverable("connector syncs are not configured in this process")
        attempt = current_attempt(SYNC_RETRY)
        run_sync(
            self.sessions,
            self.router,
            self.ctx.connectors,
            organization_id=organization_id,
            binding_id=binding_id,
            full=full,
            scheduled=scheduled,
            final_attempt=attempt.is_final,
            delay_ends_job=attempt.delay_ends_job,
        )
