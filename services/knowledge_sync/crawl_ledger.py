"""The crawl ledger: which URLs a crawl task claimed, and which of them are finished.

One ``api2.knowledge_base_crawl_task_urls`` row per claimed URL, unique per (organization,
task, url). The rules that keep ``knowledge_base_crawl_tasks.urls_pending`` exact under
retries, redeliveries and concurrent workers:

* a claim (the row) and its ``urls_pending`` increment commit in one transaction;
* ``finished_at`` and the decrement (and, at zero, the completion) commit in one
  transaction, guarded by ``finished_at IS NULL``, so a URL is counted down once;
* children are claimed only by an unfinished parent, in the transaction that finishes
  it, so a replayed parent re-emits exactly the children it claimed;
* every change of the counts first locks the task row (``FOR UPDATE``), which serialises
  workers of one task: no lost update, and the URL cap holds.

Each function works in the caller's transaction and commits nothing. Every statement
filters on ``organization_id``: a task of another organization is a missing task
(``RecordMissing``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from sqlalchemy import ColumnElement, and_, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from router.requests import JobRequest
from services.web.urls import normalize_url
from shared.db.base import utcnow
from shared.db.models.api2 import KnowledgeBaseCrawlTaskUrl as LedgerRow
from shared.db.models.rails import KnowledgeBaseCrawlTask as CrawlTask
from shared.db.tenant import organization_filter
from shared.errors import RecordMissing, Unrecoverable

log = logging.getLogger(__name__)

RUNNING = "running"
COMPLETED = "completed"
_MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class ChildRequest:
    """A ``crawl_url`` follow-up: one claimed URL of a crawl task."""

    kind: ClassVar[str] = "crawl_url"

    organization_id: int
    crawl_task_id: int
    url: str
    parent_url: str | None
    depth: int

    def job_request(self) -> JobRequest:
        """The request to enqueue (its job id is ``kb-crawl-url-<task>-<sha256(url)>``)."""
        return JobRequest(
            self.kind,
            self.organization_id,
            {
                "crawl_task_id": self.crawl_task_id,
                "url": self.url,
                "parent_url": self.parent_url,
                "depth": self.depth,
            },
        )


@dataclass(frozen=True)
class LedgerUrl:
    """A claimed URL as the ledger knows it."""

    url: str
    parent_url: str | None
    depth: int
    finished: bool


@dataclass(frozen=True)
class _LockedTask:
    root_url: str
    status: str
    urls_pending: int
    max_depth: int
    max_urls: int


def _task_filter(organization_id: int, crawl_task_id: int) -> ColumnElement[bool]:
    return and_(organization_filter(CrawlTask, organization_id), CrawlTask.id == crawl_task_id)


def _rows_of(organization_id: int, crawl_task_id: int) -> ColumnElement[bool]:
    return and_(
        organization_filter(LedgerRow, organization_id), LedgerRow.crawl_task_id == crawl_task_id
    )


def _missing(organization_id: int, crawl_task_id: int) -> RecordMissing:
    return RecordMissing(
        f"knowledge base crawl task {crawl_task_id} not found in organization {organization_id}"
    )


def _lock_task(session: Session, organization_id: int, crawl_task_id: int) -> _LockedTask:
    """Lock the task row until the transaction ends and read its counts as locked."""
    row = session.execute(
        select(
            CrawlTask.root_url,
            CrawlTask.status,
            CrawlTask.urls_pending,
            CrawlTask.max_depth,
            CrawlTask.max_urls,
        )
        .where(_task_filter(organization_id, crawl_task_id))
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise _missing(organization_id, crawl_task_id)
    return _LockedTask(*row)


def _require_task(session: Session, organization_id: int, crawl_task_id: int) -> None:
    found = session.execute(
        select(CrawlTask.id).where(_task_filter(organization_id, crawl_task_id))
    ).first()
    if found is None:
        raise _missing(organization_id, crawl_task_id)


def _insert_claims(
    session: Session,
    organization_id: int,
    crawl_task_id: int,
    *,
    parent_url: str | None,
    depth: int,
    urls: list[str],
) -> int:
    """Insert ledger rows, skipping URLs already claimed; the number actually inserted."""
    if not urls:
        return 0
    statement = (
        insert(LedgerRow)
        .values(
            [
                {
                    "organization_id": organization_id,
                    "crawl_task_id": crawl_task_id,
                    "url": url,
                    "url_hash": hashlib.sha256(url.encode()).hexdigest(),
                    "parent_url": parent_url,
                    "depth": depth,
                }
                for url in urls
            ]
        )
        .on_conflict_do_nothing(index_elements=["organization_id", "crawl_task_id", "url"])
        .returning(LedgerRow.id)
    )
    return len(session.execute(statement).all())


def _add_pending(session: Session, organization_id: int, crawl_task_id: int, count: int) -> None:
    session.execute(
        update(CrawlTask)
        .where(_task_filter(organization_id, crawl_task_id))
        .values(urls_pending=CrawlTask.urls_pending + count)
    )


def _has_unfinished(session: Session, organization_id: int, crawl_task_id: int) -> bool:
    unfinished = (
        select(LedgerRow.id)
        .where(_rows_of(organization_id, crawl_task_id), LedgerRow.finished_at.is_(None))
        .limit(1)
    )
    return session.execute(unfinished).first() is not None


def _complete(session: Session, organization_id: int, crawl_task_id: int) -> None:
    session.execute(
        update(CrawlTask)
        .where(_task_filter(organization_id, crawl_task_id))
        .values(status=COMPLETED, finished_at=utcnow())
    )


def start(session: Session, *, organization_id: int, crawl_task_id: int) -> list[ChildRequest]:
    """Mark the task running and claim its root URL (depth 0) once.

    Returns the root as the follow-up request, also when an earlier run claimed it (a
    re-run replays it without counting it again). A task whose every claimed URL is
    finished is (marked) completed and returns nothing.

    Raises:
      RecordMissing: the task is missing or belongs to another organization.
      Unrecoverable: the task's root URL is not an http(s) URL.
    """
    task = _lock_task(session, organization_id, crawl_task_id)
    root = normalize_url(task.root_url)
    if root is None:
        raise Unrecoverable(f"crawl task {crawl_task_id}: root URL {task.root_url!r} is unusable")
    claimed = _insert_claims(
        session, organization_id, crawl_task_id, parent_url=None, depth=0, urls=[root]
    )
    if claimed:
        _add_pending(session, organization_id, crawl_task_id, claimed)
    elif not _has_unfinished(session, organization_id, crawl_task_id):
        if task.status != COMPLETED:
            _complete(session, organization_id, crawl_task_id)
        return []
    if task.status != RUNNING:
        session.execute(
            update(CrawlTask)
            .where(_task_filter(organization_id, crawl_task_id))
            .values(status=RUNNING, started_at=func.coalesce(CrawlTask.started_at, utcnow()))
        )
    return [ChildRequest(organization_id, crawl_task_id, root, None, 0)]


def ledger_url(
    session: Session, *, organization_id: int, crawl_task_id: int, url: str
) -> LedgerUrl | None:
    """The ledger's row for ``url``, or None when the task never claimed it.

    Raises:
      RecordMissing: the task is missing or belongs to another organization.
    """
    _require_task(session, organization_id, crawl_task_id)
    row = session.execute(
        select(LedgerRow.url, LedgerRow.parent_url, LedgerRow.depth, LedgerRow.finished_at).where(
            _rows_of(organization_id, crawl_task_id), LedgerRow.url == url
        )
    ).one_or_none()
    if row is None:
        return None
    return LedgerUrl(row.url, row.parent_url, row.depth, row.finished_at is not None)


def is_finished(session: Session, *, organization_id: int, crawl_task_id: int, url: str) -> bool:
    """Whether ``url`` is claimed and finished (a re-run then only replays its children)."""
    row = ledger_url(session, organization_id=organization_id, crawl_task_id=crawl_task_id, url=url)
    return row is not None and row.finished


def children_of(
    session: Session, *, organization_id: int, crawl_task_id: int, parent_url: str
) -> list[ChildRequest]:
    """Every URL ``parent_url`` claimed, in claim order: the follow-ups a replay re-emits."""
    _require_task(session, organization_id, crawl_task_id)
    rows = session.execute(
        select(LedgerRow.url, LedgerRow.depth)
        .where(_rows_of(organization_id, crawl_task_id), LedgerRow.parent_url == parent_url)
        .order_by(LedgerRow.id)
    ).all()
    return [ChildRequest(organization_id, crawl_task_id, u, parent_url, d) for u, d in rows]


def _unclaimed(
    session: Session,
    organization_id: int,
    crawl_task_id: int,
    task: _LockedTask,
    parent_url: str,
    urls: Iterable[str],
) -> list[str]:
    """``urls`` in page order without duplicates, the parent, or URLs the task claimed
    already, cut to the room left under the task's ``max_urls``."""
    candidates = list(dict.fromkeys(url for url in urls if url != parent_url))
    known = set(
        session.scalars(
            select(LedgerRow.url).where(
                _rows_of(organization_id, crawl_task_id), LedgerRow.url.in_(candidates)
            )
        )
    )
    claimed_so_far = session.scalar(
        select(func.count()).select_from(LedgerRow).where(_rows_of(organization_id, crawl_task_id))
    )
    room = max(0, task.max_urls - int(claimed_so_far or 0))
    return [url for url in candidates if url not in known][:room]


def claim_children(
    session: Session,
    *,
    organization_id: int,
    crawl_task_id: int,
    parent_url: str,
    depth: int,
    urls: Iterable[str],
) -> list[ChildRequest]:
    """Claim ``urls`` as children of ``parent_url`` at ``depth + 1``; return all its children.

    Parameters:
      depth: the parent's depth. Nothing is claimed beyond the task's ``max_depth``, nor
        past ``max_urls`` ledger rows for the task, nor by a parent already finished (a
        duplicate delivery that lost the race re-emits the winner's children instead).
      urls: in page order; duplicates, the parent itself and URLs the task already
        claimed (under any parent) are skipped.

    Returns every child this parent claimed, in this run or an earlier one, so a retried
    parent re-derives the same follow-up requests.

    Raises:
      RecordMissing: the task is missing or of another organization, or ``parent_url`` is
        not claimed by the task.
    """
    task = _lock_task(session, organization_id, crawl_task_id)
    parent = session.execute(
        select(LedgerRow.finished_at).where(
            _rows_of(organization_id, crawl_task_id), LedgerRow.url == parent_url
        )
    ).one_or_none()
    if parent is None:
        raise RecordMissing(f"crawl task {crawl_task_id} never claimed {parent_url}")
    if parent.finished_at is None and depth + 1 <= task.max_depth:
        fresh = _unclaimed(session, organization_id, crawl_task_id, task, parent_url, urls)
        claimed = _insert_claims(
            session,
            organization_id,
            crawl_task_id,
            parent_url=parent_url,
            depth=depth + 1,
            urls=fresh,
        )
        if claimed:
            _add_pending(session, organization_id, crawl_task_id, claimed)
    return children_of(
        session, organization_id=organization_id, crawl_task_id=crawl_task_id, parent_url=parent_url
    )


def finish(
    session: Session,
    *,
    organization_id: int,
    crawl_task_id: int,
    url: str,
    error: str | None = None,
) -> bool:
    """Mark ``url`` finished and count it down, once; complete the task at zero.

    The task completes when ``urls_pending`` reaches zero and the ledger agrees that no
    claimed URL is unfinished (should the two ever disagree, the last finish completes it).

    Parameters:
      error: why the URL finished without content (4xx, robots.txt, the final attempt's
        failure); recorded as the task's ``last_error``. None counts it as crawled.

    Returns True when this call finished the URL, False when it was finished already (or
    never claimed): then nothing changes.

    Raises:
      RecordMissing: the task is missing or belongs to another organization.
    """
    _lock_task(session, organization_id, crawl_task_id)
    now = utcnow()
    finished = session.execute(
        update(LedgerRow)
        .where(
            _rows_of(organization_id, crawl_task_id),
            LedgerRow.url == url,
            LedgerRow.finished_at.is_(None),
        )
        .values(finished_at=now)
        .returning(LedgerRow.id)
    ).first()
    if finished is None:
        return False
    counts: dict[str, object] = {"urls_pending": CrawlTask.urls_pending - 1}
    if error is None:
        counts["urls_crawled"] = CrawlTask.urls_crawled + 1
    else:
        counts["last_error"] = error[:_MAX_ERROR_LENGTH]
    pending = session.execute(
        update(CrawlTask)
        .where(_task_filter(organization_id, crawl_task_id), CrawlTask.urls_pending > 0)
        .values(counts)
        .returning(CrawlTask.urls_pending)
    ).scalar_one_or_none()
    if pending is None:
        log.warning(
            "crawl task %s: urls_pending was already 0 when %s finished", crawl_task_id, url
        )
    if not pending and not _has_unfinished(session, organization_id, crawl_task_id):
        _complete(session, organization_id, crawl_task_id)
    return True
