"""Crawl units on the platform: start_crawl and crawl_url, and URL sources' daily sync.

The decisions live in ``crawl_step.py`` and ``crawl_ledger.py``; this module binds them to a
session, the page fetcher and the job's attempt, commits, and hands back the follow-ups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from router.requests import JobRequest
from router.unit_of_work import UnitOfWork
from services.knowledge_sync import crawl_ledger, store
from services.knowledge_sync.crawl_step import crawl_url_step
from services.knowledge_sync.families import document_request
from services.web.fetch import CrawledPage
from shared.db.models.rails import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseDocument,
    KnowledgeBaseSource,
)
from shared.db.tenant import require_scoped
from shared.errors import Unrecoverable
from tiers.attempts import current_attempt
from tiers.policies import DEFAULT_RETRY, RetryPolicy

#: Sources whose documents come from crawling their root URL.
CRAWLED_SOURCE_TYPES = ("url", "website")


@dataclass(frozen=True)
class CrawlContext:
    """The page fetcher (robots, politeness and SSRF guard bound in) and the crawl_url
    family's retry policy, which says when an attempt is the last."""

    fetch: Callable[[str], CrawledPage]
    retry: RetryPolicy = DEFAULT_RETRY


def plan_source_crawl(
    session: Session, organization_id: int, source: KnowledgeBaseSource, now: datetime
) -> list[JobRequest]:
    """A URL source's sync: continue its unfinished crawl task, or open a new one on the
    source's root URL, and start it."""
    task = store.unfinished_crawl_task(session, organization_id, source.id)
    if task is None:
        root = source.settings.get("url") or source.settings.get("root_url")
        if not root:
            raise Unrecoverable(f"url source {source.id} has no url setting")
        task = KnowledgeBaseCrawlTask(
            organization_id=organization_id,
            knowledge_base_source_id=source.id,
            root_url=str(root),
            max_depth=int(source.settings.get("max_depth", 3)),
            max_urls=int(source.settings.get("max_urls", 200)),
            created_at=now,
            updated_at=now,
        )
        session.add(task)
        session.flush()
    store.mark_source_synced(source, now)
    return [JobRequest("start_crawl", organization_id, {"crawl_task_id": task.id})]


def _store_page(
    session: Session, organization_id: int, crawl_task_id: int, page: CrawledPage, now: datetime
) -> KnowledgeBaseDocument:
    """Upsert the crawled page as a document of the task's source."""
    task = require_scoped(
        session, KnowledgeBaseCrawlTask, crawl_task_id, organization_id=organization_id
    )
    source = store.live_source(session, organization_id, task.knowledge_base_source_id)
    found = store.document_with_identifier(session, organization_id, source.id, page.final_url)
    row = store.reclaim_or_add_document(
        session, organization_id, source, page.final_url, found, now
    )
    row.url = page.final_url
    store.store_content(row, page.title or page.final_url, page.markdown, now)
    session.flush()
    return row


def start_crawl(uow: UnitOfWork, *, organization_id: int, crawl_task_id: int) -> None:
    """Claim the crawl's roots and commit; their crawl_url jobs follow the commit."""
    roots = crawl_ledger.start(
        uow.session, organization_id=organization_id, crawl_task_id=crawl_task_id
    )
    uow.enqueue(*(root.job_request() for root in roots))
    uow.commit()


def crawl_url(
    uow: UnitOfWork,
    crawl: CrawlContext,
    *,
    organization_id: int,
    crawl_task_id: int,
    url: str,
    depth: int,
    now: datetime,
) -> Exception | None:
    """Run one crawl_url unit and commit; its follow-ups (the claimed children and the
    page's chunk sync) follow the commit. Returns the failure that finished the URL without
    content, if any, for the caller to raise once the unit is done."""
    session = uow.session
    stored: list[KnowledgeBaseDocument] = []
    attempt = current_attempt(crawl.retry)
    result = crawl_url_step(
        session,
        organization_id=organization_id,
        crawl_task_id=crawl_task_id,
        url=url,
        depth=depth,
        fetch=crawl.fetch,
        final_attempt=attempt.is_final,
        store_page=lambda page: stored.append(
            _store_page(session, organization_id, crawl_task_id, page, now)
        ),
        delay_ends_job=attempt.delay_ends_job,
    )
    needs_chunks = [row.id for row in stored if row.chunks_synced_at is None and row.content]
    uow.enqueue(*(child.job_request() for child in result.children))
    uow.enqueue(
        *(
            document_request("sync_document_chunks", organization_id, document_id, None)
            for document_id in needs_chunks
        )
    )
    uow.commit()
    return result.failure
