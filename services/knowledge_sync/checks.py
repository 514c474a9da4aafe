"""The seed's validation queries as pass/fail checks (``speedtier kb check``).

| check | passes when |
| --- | --- |
| recovery-sweep backlog | no kept document has content but no chunks |
| sources still failing | no live source (but Intercom) failed or went two days unsynced |
| pause flag | ``pause_api2_knowledge_base_sync`` is off |
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.knowledge_sync import store
from services.knowledge_sync.families import PAUSE_FLAG
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


def run_checks(session: Session, flags: Flags) -> list[Check]:
    """Every check, in the order ``speedtier kb check`` prints them."""
    return [recovery_backlog(session), failing_sources(session), pause_flag_off(flags)]
