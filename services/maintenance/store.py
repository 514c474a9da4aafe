"""The maintenance families' SQL over the mirrored Rails tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

UNIT21_KEY = "unit21"

# SyncJobs::SyncUnit21Job's selection: OrganizationDataSource.kept.joins(:data_source)
# .where(data_sources: { key: "unit21" }).
_UNIT21_SOURCES = text(
    "SELECT ods.organization_id, ods.id FROM organization_data_sources ods"
    " JOIN data_sources ds ON ds.id = ods.data_source_id"
    " WHERE ds.key = :key AND ods.discarded_at IS NULL"
    " ORDER BY ods.id"
)


def unit21_sources(session: Session) -> list[tuple[int, int]]:
    """``(organization id, organization data source id)`` of every kept Unit21 source."""
    rows = session.execute(_UNIT21_SOURCES, {"key": UNIT21_KEY}).all()
    return [(int(org), int(ods)) for org, ods in rows]


#: The advisory lock shared with Rails' FixCounterCachesJob (session level).
LOCK_KEY_SQL = "hashtextextended('fix_counter_caches', 0)"
_TRY_LOCK = text(f"SELECT pg_try_advisory_lock({LOCK_KEY_SQL})")
_UNLOCK = text(f"SELECT pg_advisory_unlock({LOCK_KEY_SQL})")


def try_counter_cache_lock(connection: Connection) -> bool:
    return bool(connection.execute(_TRY_LOCK).scalar())


def release_counter_cache_lock(connection: Connection) -> None:
    connection.execute(_UNLOCK)


#: Counters whose definition the mirrored schema makes evident: a ``belongs_to ...,
#: counter_cache: true`` parent column named ``<children>_count`` over the child's foreign
#: key (step -> parent table, counter column, child table, foreign key).
NATIVE_COUNTERS: dict[str, tuple[str, str, str, str]] = {
    "assignment_queue_memberships": (
        "assignment_queues",
        "assignment_queue_memberships_count",
        "assignment_queue_memberships",
        "assignment_queue_id",
    ),
    "group_employees": ("groups", "group_employees_count", "group_employees", "group_id"),
    "sheet_rows": ("sheets", "sheet_rows_count", "sheet_rows", "sheet_id"),
}


def limit_statements(session: Session, timeout: str) -> None:
    """``SET LOCAL statement_timeout`` for the session's current transaction."""
    session.execute(text("SELECT set_config('statement_timeout', :t, true)"), {"t": timeout})


def repair_counter(session: Session, step: str) -> int:
    """Rails' ``reset_counters`` for every parent of ``step`` at once: set each counter that
    differs from its children's count (no timestamp touched); returns how many were fixed."""
    parent, counter, child, foreign_key = NATIVE_COUNTERS[step]
    fixed = session.execute(
        text(
            f"UPDATE {parent} AS p SET {counter} = fresh.n"
            f" FROM (SELECT q.id, count(c.id) AS n FROM {parent} q"
            f" LEFT JOIN {child} c ON c.{foreign_key} = q.id GROUP BY q.id) AS fresh"
            f" WHERE fresh.id = p.id AND p.{counter} IS DISTINCT FROM fresh.n"
            " RETURNING p.id"
        )
    ).all()
    return len(fixed)


def counter_drift(session: Session, step: str) -> int:
    """How many parents of native counter ``step`` differ from their children's count."""
    parent, counter, child, foreign_key = NATIVE_COUNTERS[step]
    return int(
        session.execute(
            text(
                f"SELECT count(*) FROM {parent} p WHERE p.{counter} IS DISTINCT FROM"
                f" (SELECT count(*) FROM {child} c WHERE c.{foreign_key} = p.id)"
            )
        ).scalar_one()
    )


def counters_out_of_parity(session: Session) -> dict[str, int]:
    """Per native counter: parents whose counter differs from the count (``maintenance
    check``'s "unchanged counter parity")."""
    return {step: counter_drift(session, step) for step in NATIVE_COUNTERS}


#: The retained GoodJob classes the maintenance families replaced (seed 001's bake: zero new
#: normal-path rows; rows inside the 12-hour cleanup window are historical).
REPLACED_GOOD_JOB_CLASSES = ("SyncJobs::SyncUnit21Job", "FixCounterCachesJob")
_NEW_GOOD_JOBS = text(
    "SELECT job_class, count(*) FROM good_jobs WHERE job_class IN :classes"
    " AND created_at > (now() AT TIME ZONE 'UTC') - interval '12 hours' GROUP BY job_class"
).bindparams(bindparam("classes", expanding=True))


def new_good_jobs(session: Session) -> dict[str, int]:
    """New GoodJob rows of the replaced classes in the last 12 hours, per class."""
    rows = session.execute(_NEW_GOOD_JOBS, {"classes": list(REPLACED_GOOD_JOB_CLASSES)}).all()
    return {str(job_class): int(count) for job_class, count in rows}


#: ENG-3000's retained classes: the summary fallback job, and the two GoodJob cron entries
#: of the expired-evaluation sweep (matched by ``cron_key``, which GoodJob writes on every
#: cron-enqueued row, and by the class names Rails is believed to use for them).
SUMMARY_JOB_CLASS = "SummarizeConversationJob"
EXPIRED_EVALUATION_CRON_KEYS = (
    "mark_expired_evaluations_as_failed",
    "mark_expired_qa_evaluation_requests_as_failed",
)
EXPIRED_EVALUATION_JOB_CLASSES = (
    "MarkExpiredEvaluationsAsFailedJob",
    "MarkExpiredQaEvaluationRequestsAsFailedJob",
)
_BAKE_GOOD_JOBS = text(
    "SELECT job_class, cron_key, count(*) AS jobs, min(created_at) AS first_seen,"
    " max(created_at) AS last_seen FROM good_jobs"
    " WHERE (job_class = :summary OR job_class IN :classes OR cron_key IN :cron_keys)"
    " AND created_at > (now() AT TIME ZONE 'UTC') - interval '24 hours'"
    " GROUP BY job_class, cron_key ORDER BY jobs DESC"
).bindparams(bindparam("classes", expanding=True), bindparam("cron_keys", expanding=True))


def summary_bake_rows(session: Session) -> list[tuple[str, str | None, int, object, object]]:
    """ENG-3000's bake: ``(job class, cron key, rows, first, last)`` of the summary and
    expired-evaluation GoodJob rows created in the last 24 hours."""
    rows = session.execute(
        _BAKE_GOOD_JOBS,
        {
            "summary": SUMMARY_JOB_CLASS,
            "classes": list(EXPIRED_EVALUATION_JOB_CLASSES),
            "cron_keys": list(EXPIRED_EVALUATION_CRON_KEYS),
        },
    ).all()
    return [(str(r[0]), r[1], int(r[2]), r[3], r[4]) for r in rows]
