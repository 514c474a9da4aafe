"""Row collection for one organization's report, by one of two engines.

``native``
  PostHog ``api2_daily_agent_evaluation_report_collect`` is on for the organization: the
  port of ``QAEvaluationReport::RowCollector`` (:func:`services.reports.store.collect_rows`)
  in one transaction with ``statement_timeout = 5min``, no Rails call.
``rails``
  the flag is off, or PostHog is unreachable (fail closed):
  ``POST /internal/daily_agent_evaluation_reports/collect``.

A job picks its engine once and keeps it in its durable state, so its retries replay the
same engine: a native failure is never retried through Rails inside the job, and a flag
flipped mid-incident cannot make one report collect twice by two paths.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Literal

from sqlalchemy.orm import Session, sessionmaker

from services.rails.client import RailsClient
from services.reports.store import ReportRow, collect_rows
from shared.errors import Unrecoverable
from shared.flags import Flags
from shared.rollouts import DAILY_AGENT_EVALUATION_REPORT_COLLECT

Engine = Literal["native", "rails"]
COLLECT_PATH = "/internal/daily_agent_evaluation_reports/collect"


def choose_engine(flags: Flags, organization_id: int) -> Engine:
    """The engine the rollout flag names for this organization now."""
    on = flags.rollout(DAILY_AGENT_EVALUATION_REPORT_COLLECT, organization_id=organization_id)
    return "native" if on else "rails"


def collect(
    engine: Engine,
    *,
    sessions: sessionmaker[Session],
    rails: Callable[[], RailsClient],
    organization_id: int,
    day: date,
    time_zone: str | None,
) -> list[ReportRow]:
    """The organization's rows for ``day`` through ``engine`` (no fallback to the other)."""
    if engine == "native":
        with sessions() as session, session.begin():
            return collect_rows(session, organization_id, day, time_zone)
    answer = rails().post(
        COLLECT_PATH, {"organization_id": organization_id, "date": day.isoformat()}
    )
    rows = answer.get("rows")
    if not isinstance(rows, list):
        raise Unrecoverable(f"{COLLECT_PATH} answered without a rows list: {sorted(answer)}")
    try:
        return [ReportRow.from_json(row) for row in rows]
    except (KeyError, TypeError, ValueError) as exc:
        raise Unrecoverable(f"{COLLECT_PATH} answered a malformed row: {exc}") from exc
