"""Shadow runs of the native report row collector (the Scientist pattern).

With PostHog ``api2_daily_agent_evaluation_report_collect_shadow`` on for an organization
whose report still collects through Rails (the control), the job also runs the native
collector (the candidate) on the same input, read-only, compares the two row sets and keeps
the comparison on the job's record (``data:shadow``). The candidate never acts: its rows are
not used, its transaction is read-only and rolled back, and whatever it raises is recorded,
never raised.

| the candidate | recorded |
| --- | --- |
| the same rows | ``matched: true`` |
| rows differ | ``matched: false`` and each difference: an agent missing or extra, a field |
|             | that differs (``agent 7 evaluations: rails 3, native 2``), the row counts |
| raises | ``matched: false``, ``error`` |

``speedtier reports parity`` lists the runs of a window and exits 1 while any diverged (or
none ran); ``speedtier reports check`` fails while the last 24 hours hold a divergence.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from services.reports.store import ReportRow, collect_rows
from shared.parity import KeptShadowRun, ParityRun, ParitySource
from shared.rollouts import DAILY_AGENT_EVALUATION_REPORT_COLLECT_SHADOW
from tiers.job_store import JobStore, as_text

log = logging.getLogger(__name__)

SHADOW_FLAG = DAILY_AGENT_EVALUATION_REPORT_COLLECT_SHADOW
#: The bake window a rollout check looks back over.
SHADOW_WINDOW = timedelta(hours=24)
#: The fields compared per agent (the agent id is the identity).
FIELDS = ("agent_name", "agent_email", "evaluations", "average_score", "lowest_score")


def differences(control: Sequence[ReportRow], candidate: Sequence[ReportRow]) -> list[str]:
    """What differs between Rails' rows and the native ones, agent by agent."""
    theirs = {row.agent_id: row for row in control}
    ours = {row.agent_id: row for row in candidate}
    found: list[str] = []
    if len(control) != len(candidate):
        found.append(f"rows: rails {len(control)}, native {len(candidate)}")
    for agent in sorted(theirs.keys() - ours.keys()):
        found.append(f"agent {agent}: missing from native")
    for agent in sorted(ours.keys() - theirs.keys()):
        found.append(f"agent {agent}: only in native")
    for agent in sorted(theirs.keys() & ours.keys()):
        for field in FIELDS:
            left, right = getattr(theirs[agent], field), getattr(ours[agent], field)
            if left != right:
                found.append(f"agent {agent} {field}: rails {left!r}, native {right!r}")
    return found


def shadow_collect(
    sessions: sessionmaker[Session],
    organization_id: int,
    day: date,
    time_zone: str | None,
    control: Sequence[ReportRow],
) -> dict[str, Any]:
    """Run the native collector read-only beside Rails' answer; the comparison record."""
    record: dict[str, Any] = {
        "ran_at": datetime.now(UTC).isoformat(),
        "organization_id": organization_id,
        "date": day.isoformat(),
        "control_rows": len(control),
    }
    try:
        with sessions() as session:
            try:
                session.execute(text("SET TRANSACTION READ ONLY"))
                candidate = collect_rows(session, organization_id, day, time_zone)
            finally:
                session.rollback()
    except Exception as exc:  # the candidate never fails the job
        log.warning("report shadow run for organization %s failed: %s", organization_id, exc)
        return {**record, "matched": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    found = differences(control, candidate)
    return {
        **record,
        "candidate_rows": len(candidate),
        "matched": not found,
        "differences": found[:200],
    }


@dataclass(frozen=True)
class ShadowRun(KeptShadowRun):
    """One job's comparison, as kept on its record."""

    job_id: str = ""


def shadow_runs(
    jobs: JobStore, prefix: str, since: datetime, organization_id: int | None = None
) -> list[ShadowRun]:
    """The comparisons kept on report job records (``prefix*``) since ``since``, oldest
    first (a record lives for the family's retention)."""
    key_prefix = jobs.record_key(prefix)
    runs: list[ShadowRun] = []
    for key in jobs.client.scan_iter(match=f"{key_prefix}*", count=500):
        raw = jobs.client.hget(key, "data:shadow")
        if raw is None:
            continue
        run = ShadowRun(json.loads(raw), job_id=as_text(key)[len(key_prefix) - len(prefix) :])
        if run.ran_at < since:
            continue
        if organization_id is not None and run.record.get("organization_id") != organization_id:
            continue
        runs.append(run)
    return sorted(runs, key=lambda run: (run.ran_at, run.job_id))


def parity_source(jobs: JobStore, prefix: str) -> ParitySource:
    """The report shadow runs as the dashboard's Parity page reads them."""

    def read(since: datetime) -> list[ParityRun]:
        return [_parity(run) for run in shadow_runs(jobs, prefix, since)]

    return read


def _parity(run: ShadowRun) -> ParityRun:
    record = run.record
    error = record.get("error")
    found = list(record.get("differences", []))
    if error:
        found.insert(0, f"native raised: {error}")
    organization_id = record.get("organization_id")
    return ParityRun(
        product="reports",
        organization_id=int(organization_id) if organization_id is not None else None,
        ran_at=run.ran_at,
        matched=run.matched,
        subject=f"report {record.get('date', '?')}",
        summary=f"rails {record.get('control_rows')} rows, native "
        f"{record.get('candidate_rows', '-')} rows",
        differences=tuple(str(line) for line in found),
        job_id=run.job_id,
    )
