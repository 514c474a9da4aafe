"""The retained GoodJob rows of the six Knowledge Library job classes (``good_jobs`` and
``good_job_executions``, mirrored from Rails): seed 000's two GoodJob queries, verbatim (the
deploy-timestamp placeholder becomes the bind parameter ``:since``), behind the bake checks
in ``speedtier kb check``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

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

NEW_ROWS_SINCE_DEPLOY = text("""\
SELECT job_class, count(*) AS jobs,
       min(created_at) AS first_seen, max(created_at) AS last_seen
FROM good_jobs
WHERE job_class IN (
  'SyncKnowledgeBaseSourcesJob', 'SyncKnowledgeBaseSourceJob',
  'SyncKnowledgeBaseDocumentJob', 'SyncKnowledgeBaseDocumentChunksJob',
  'StartKnowledgeBaseCrawlJob', 'CrawlKnowledgeBaseUrlJob')
  AND created_at > :since
GROUP BY job_class ORDER BY jobs DESC;""")

THROTTLE_STORM = text("""\
SELECT j.job_class, count(e.*) AS executions, count(DISTINCT j.active_job_id) AS unique_jobs,
       count(*) FILTER (WHERE e.error ILIKE '%throttle%') AS throttle_failures
FROM good_job_executions e JOIN good_jobs j ON j.active_job_id = e.active_job_id
WHERE j.job_class LIKE '%KnowledgeBase%' AND e.created_at > now() - interval '12 hours'
GROUP BY j.job_class;""")


@dataclass(frozen=True)
class ClassRows:
    """One job class's new GoodJob rows."""

    job_class: str
    jobs: int
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True)
class ClassExecutions:
    """One job class's executions in GoodJob's window."""

    job_class: str
    executions: int
    unique_jobs: int
    throttle_failures: int


def rows_since(session: Session, since: datetime) -> list[ClassRows]:
    """Per retained class, its GoodJob rows created after ``since`` (naive UTC), most first."""
    return [
        ClassRows(str(row.job_class), int(row.jobs), row.first_seen, row.last_seen)
        for row in session.execute(NEW_ROWS_SINCE_DEPLOY, {"since": since})
    ]


def executions_in_window(session: Session) -> list[ClassExecutions]:
    """Per knowledge-base class, executions, unique jobs and throttle failures of the last 12
    hours (from ``good_job_executions``)."""
    return [
        ClassExecutions(
            str(row.job_class),
            int(row.executions),
            int(row.unique_jobs),
            int(row.throttle_failures),
        )
        for row in session.execute(THROTTLE_STORM)
    ]
