"""The seed's validation queries as pass/fail checks (``speedtier kb check``).

| check | passes when |
| --- | --- |
| recovery-sweep backlog | no kept document has content but no chunks |
| sources still failing | no live source (but Intercom) failed or went two days unsynced |
| pause flag | ``pause_api2_knowledge_base_sync`` is off |
| new GoodJob rows | no row of the six retained classes in GoodJob's 12-hour window, unless |
|                  | the pause flag is on (then Rails enqueues them on purpose)               |
| throttle storm | no execution of a knowledge-base class in the window failed on a throttle |
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.knowledge_sync import store
from services.knowledge_sync.families import PAUSE_FLAG
from services.knowledge_sync.good_jobs import RETAINED, executions_in_window, rows_since
from shared.db.base import utcnow
from shared.flags import Flags


@dataclass(frozen=True)
class Check:
    """One check's verdict: a one-line summary, and the rows behind a failure."""

    passed: bool
    summary: str
    details: tuple[str, ...] = ()


def recovery_backlog(session: Session) -> Check:
    backlog = store.recovery_backlog_size(session)
    return Check(backlog == 0, f"recovery-sweep backlog (content but no chunks): {backlog}")


def failing_sources(session: Session) -> Check:
    rows = store.sources_still_failing(session)
    return Check(
        not rows,
        f"sources still failing after the daily scan: {len(rows)}",
        tuple(
            f"source {row.id} org {row.organization_id} {row.type}"
            f" {row.sync_status} last synced {row.last_synced_at}"
            for row in rows
        ),
    )


def pause_flag_off(flags: Flags) -> Check:
    paused = flags.is_enabled(PAUSE_FLAG)
    return Check(not paused, f"{PAUSE_FLAG} is {'on' if paused else 'off'} (expected off)")


def good_job_checks(session: Session, flags: Flags) -> list[Check]:
    """Seed 000's GoodJob queries over GoodJob's retention window (12 hours): no new
    normal-path rows of the six classes (expected while the pause flag is on), and no
    execution that failed on a throttle (the storm this pipeline replaced)."""
    rows = rows_since(session, (utcnow() - RETAINED).replace(tzinfo=None))
    jobs = sum(row.jobs for row in rows)
    paused = flags.is_enabled(PAUSE_FLAG)
    details = tuple(
        f"{row.job_class}: {row.jobs} jobs, {row.first_seen} to {row.last_seen}" for row in rows
    )
    expected = "expected while paused" if paused else "expected 0"
    new_rows = Check(
        jobs == 0 or paused,
        f"new GoodJob rows of the knowledge base classes in 12 hours: {jobs} ({expected})",
        details,
    )
    executions = executions_in_window(session)
    storms = sum(row.throttle_failures for row in executions)
    throttle = Check(
        storms == 0,
        f"GoodJob throttle failures in 12 hours: {storms} (expected 0)",
        tuple(
            f"{row.job_class}: {row.executions} executions of {row.unique_jobs} jobs,"
            f" {row.throttle_failures} throttle failures"
            for row in executions
            if row.throttle_failures
        ),
    )
    return [new_rows, throttle]


def run_checks(session: Session, flags: Flags) -> list[Check]:
    """Every check, in the order ``speedtier kb check`` prints them."""
    return [
        recovery_backlog(session),
        failing_sources(session),
        pause_flag_off(flags),
        *good_job_checks(session, flags),
    ]
