"""The retained GoodJob rows of the six Knowledge Library job classes (``good_jobs``,
mirrored from Rails): the reads behind seed 000's bake checks in ``speedtier kb check``.

``good_job_executions`` is not mirrored, so the throttle-storm check reads the jobs'
``executions_count`` and last ``error`` instead of joining the executions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared.db.models import GoodJob

#: The six retained classes (seed 000, "Retained jobs").
KNOWLEDGE_BASE_JOB_CLASSES = (
    "SyncKnowledgeBaseSourcesJob",
    "SyncKnowledgeBaseSourceJob",
    "SyncKnowledgeBaseDocumentJob",
    "SyncKnowledgeBaseDocumentChunksJob",
    "StartKnowledgeBaseCrawlJob",
    "CrawlKnowledgeBaseUrlJob",
)
#: GoodJob's retention window the seed's queries look back over.
RETAINED = timedelta(hours=12)


@dataclass(frozen=True)
class ClassRows:
    """One job class's GoodJob rows in the window."""

    job_class: str
    jobs: int
    executions: int
    throttle_failures: int
    first_seen: datetime
    last_seen: datetime


def rows_since(session: Session, since: datetime) -> list[ClassRows]:
    """Per retained class, its GoodJob rows created since ``since`` (most first)."""
    throttled = func.count().filter(GoodJob.error.ilike("%throttle%"))
    statement = (
        select(
            GoodJob.job_class,
            func.count(func.distinct(GoodJob.active_job_id)),
            func.coalesce(func.sum(GoodJob.executions_count), 0),
            throttled,
            func.min(GoodJob.created_at),
            func.max(GoodJob.created_at),
        )
        .where(
            GoodJob.job_class.in_(KNOWLEDGE_BASE_JOB_CLASSES),
            GoodJob.created_at > since,
        )
        .group_by(GoodJob.job_class)
        .order_by(func.count().desc(), GoodJob.job_class)
    )
    return [
        ClassRows(str(row[0]), int(row[1]), int(row[2] or 0), int(row[3]), row[4], row[5])
        for row in session.execute(statement)
    ]
