"""The report ticks' aggregate job (:mod:`services.reports.ticks` schedules it).

The tick is the seed's ``SendDailyAgentEvaluationReportJob``. Its first act, before any
external call, is to resolve every reportable organization's date in that organization's
zone at the tick's instant and keep the result (``resolvedDates``) in its durable job state;
a retry reads them back, so one that runs after a tenant's local midnight keeps its day.
Then, as resumable steps:

``fan_out``         one ``daily-agent-eval-report-<org>-<date>-no-email-bf`` job per
                    organization (``send_email: false``, ``queue_backfill: true``)
``combined_email``  rows collected for every organization, one email through Rails with one
                    CSV attachment per organization that produced rows, under the delivery
                    key ``combined/<tick job id>/<enqueued at>`` that Rails honours
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from typing import Any

from dramatiq.middleware import CurrentMessage

from router.enqueue import Router, enqueue_settled
from services.reports import collect as collection
from services.reports.csv_export import combined_attachments
from services.reports.dates import resolve
from services.reports.families import report_request
from services.reports.report_job import EMAIL_PATH, ReportsContext, delivery_key
from services.reports.store import ReportRow, reportable_organizations
from services.reports.ticks import tick_plan
from shared.db.engine import session_scope
from tiers.job_state import JobState, run_steps
from tiers.options import JOB_ID

log = logging.getLogger(__name__)


def resolved_dates(context: ReportsContext, day: str | date, instant: datetime) -> dict[str, str]:
    """Reportable organization id -> its date, resolved in its own zone at ``instant``."""
    with session_scope(context.sessions) as session:
        organizations = reportable_organizations(session)
    return {str(org.id): resolve(day, org.time_zone, instant).isoformat() for org in organizations}


def _state(context: ReportsContext) -> JobState | None:
    message = CurrentMessage.get_current_message()
    if message is None or JOB_ID not in message.options:
        return None  # run by hand outside a job: nothing to resume
    return JobState.current(context.jobs)


def run_tick(
    context: ReportsContext, router: Router, slot: str, sentinel: str, now: datetime | None = None
) -> dict[str, Any]:
    """The aggregate job's body for one slot."""
    state = _state(context)
    resolved = state.get("resolvedDates") if state is not None else None
    if resolved is None:
        day, instant = tick_plan(slot, sentinel, now or datetime.now(UTC))
        resolved = resolved_dates(context, day, instant)
        if state is not None:  # persisted before the first external call
            state.set(resolvedDates=resolved, instant=instant.isoformat(), day=str(day))

    def fan_out() -> dict[str, int]:
        requests = [
            report_request(int(org), date.fromisoformat(day), send_email=False)
            for org, day in resolved.items()
        ]
        return enqueue_settled(router, requests).summary()

    def combined_email() -> dict[str, Any]:
        return send_combined_email(context, state, resolved)

    steps = [("fan_out", fan_out), ("combined_email", combined_email)]
    results = (
        run_steps(state, steps) if state is not None else {name: step() for name, step in steps}
    )
    summary = {"organizations": len(resolved), **results}
    log.info("daily agent evaluation reports %s: %s", slot, summary)
    return summary


def send_combined_email(
    context: ReportsContext, state: JobState | None, resolved: dict[str, str]
) -> dict[str, Any]:
    """Collect every organization's rows and send one email with a CSV per organization
    that produced rows (none: no email)."""
    zones: dict[int, str] = {}
    with session_scope(context.sessions) as session:
        for reportable in reportable_organizations(session):
            zones[reportable.id] = reportable.time_zone
    engines = _pinned_engines(context, state, resolved)
    collected: dict[int, tuple[date, list[ReportRow]]] = {}
    for org_text, day_text in resolved.items():
        org, day = int(org_text), date.fromisoformat(day_text)
        rows = collection.collect(
            engines[org_text],
            sessions=context.sessions,
            rails=context.rails,
            organization_id=org,
            day=day,
            time_zone=zones.get(org),
        )
        if rows:
            collected[org] = (day, rows)
    if not collected:
        return {"sent": False, "attachments": 0}
    key = (
        delivery_key("combined", state)
        if state is not None
        else f"combined/manual/{int(datetime.now(UTC).timestamp() * 1000)}"
    )
    answer = context.rails().post(
        EMAIL_PATH,
        {"kind": "combined", "delivery_key": key, "attachments": combined_attachments(collected)},
    )
    return {"sent": True, "attachments": len(collected), "delivery_key": key, **answer}


def _pinned_engines(
    context: ReportsContext, state: JobState | None, resolved: dict[str, str]
) -> dict[str, collection.Engine]:
    """Each organization's collection engine, chosen once per tick job: a retry replays
    the same engines even if the rollout flag flipped in between."""
    pinned = state.get("collectEngines") if state is not None else None
    if pinned is None or set(pinned) != set(resolved):
        pinned = {org: collection.choose_engine(context.flags, int(org)) for org in resolved}
        if state is not None:
            state.set(collectEngines=pinned)
    return pinned
