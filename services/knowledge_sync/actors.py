"""Thin actor bodies: open a unit of work, run, commit; its follow-ups are enqueued after
the commit (router.unit_of_work)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.requests import JobRequest
from router.unit_of_work import unit_of_work
from services.knowledge_sync import store, sync_units
from services.knowledge_sync.crawl_units import CrawlContext, crawl_url, start_crawl
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay, QueueUnavailable, RecordMissing, ValidationFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnowledgeSyncActors:
    """The five actor bodies, as methods bound to their dependencies: each opens a unit of
    work, runs its unit, and commits (its follow-ups are enqueued after the commit)."""

    sessions: sessionmaker[Session]
    router: Router
    sync: sync_units.SyncContext
    crawl: CrawlContext

    def _run_unit(self, unit: Callable[[Session], list[JobRequest]]) -> None:
        with unit_of_work(self.sessions, self.router) as uow:
            uow.enqueue(*unit(uow.session))
            uow.commit()

    def sync_source(self, organization_id: int, source_id: int, **_routing: Any) -> None:
        try:
            self._run_unit(
                lambda session: sync_units.run_source_sync(
                    session,
                    self.sync,
                    organization_id=organization_id,
                    source_id=source_id,
                    now=utcnow(),
                )
            )
        except (Delay, RecordMissing, QueueUnavailable, ValidationFailed):
            raise  # not the source's failure: its writes are committed or not made at all
        except Exception as exc:
            with session_scope(self.sessions) as session:
                store.mark_source_failed(
                    session, organization_id, source_id, f"{type(exc).__name__}: {exc}"
                )
                session.commit()
            raise

    def sync_document(self, organization_id: int, document_id: int, **_routing: Any) -> None:
        self._run_unit(
            lambda session: sync_units.run_document_sync(
                session,
                self.sync,
                organization_id=organization_id,
                document_id=document_id,
                now=utcnow(),
            )
        )

    def sync_document_chunks(self, organization_id: int, document_id: int, **_routing: Any) -> None:
        with session_scope(self.sessions) as session:
            sync_units.run_document_chunks(
                session,
                self.sync,
                organization_id=organization_id,
                document_id=document_id,
                now=utcnow(),
            )
            session.commit()

    def start_crawl(self, organization_id: int, crawl_task_id: int, **_routing: Any) -> None:
        with unit_of_work(self.sessions, self.router) as uow:
            start_crawl(uow, organization_id=organization_id, crawl_task_id=crawl_task_id)

    def crawl_url(
        self,
        organization_id: int,
        crawl_task_id: int,
        url: str,
        depth: int = 0,
        parent_url: str | None = None,
        **_routing: Any,
    ) -> None:
        with unit_of_work(self.sessions, self.router) as uow:
            failure = crawl_url(
                uow,
                self.crawl,
                organization_id=organization_id,
                crawl_task_id=crawl_task_id,
                url=url,
                depth=depth,
                now=utcnow(),
            )
        if failure is not None:
            raise failure  # counted in the ledger already; the job records how it ended
