"""One organization's daily report: collect, backfill preview, Slack, email, in that order.

Each step's completion is kept in the job's durable state (:mod:`tiers.job_state`), so a
retry runs only the steps that remain; every send is claimed before it is made:

=====================  ==================================================================
step                   what it does
=====================  ==================================================================
``collect``            the rows, through the engine the job pinned on its first attempt
                       (:mod:`services.reports.collect`)
``backfill_preview``   (``queue_backfill``) ``POST .../backfill_preview``: Rails queues the
                       backfill preview or returns the active run, before any notification
``slack``              the report in the reports channel, claimed API2-side in
                       ``outbound_delivery_claims`` under ``slack/<job id>/<enqueued at>``
``email``              (``send_email``) ``POST .../email`` with the delivery key
                       ``email/<job id>/<enqueued at>``, which Rails claims and honours
=====================  ==================================================================

With ``api2_daily_agent_evaluation_report_collect_shadow`` on and the rows collected through
Rails, the native collector also runs read-only on the same input and the comparison is kept
on the job's record (:mod:`services.reports.shadow`); it never changes the report.

A Slack refusal releases the claim and the step is retried (or the job fails for a
permanent refusal); a Slack post whose outcome is unknown leaves the claim unresolved and
fails the job without a retry, for the operator to resolve (``speedtier claims``) and
re-drive. The email's key is Rails' to honour: after a timeout the retry sends the same key
and Rails answers ``already_sent`` if the first one went out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from services.rails.client import RailsClient
from services.rails.delivery_claims import DeliveryOutcome, NotDelivered, deliver_once
from services.reports import collect as collection
from services.reports.families import ReportParams
from services.reports.shadow import SHADOW_FLAG, shadow_collect
from services.reports.slack import (
    SlackRefused,
    SlackTarget,
    post_report,
    report_blocks,
)
from services.reports.store import ReportRow
from shared.db.engine import session_scope
from shared.db.models.rails import Organization
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable
from shared.flags import Flags
from tiers.job_state import JobState, run_steps
from tiers.job_store import JobStore, as_text

log = logging.getLogger(__name__)

BACKFILL_PREVIEW_PATH = "/internal/daily_agent_evaluation_reports/backfill_preview"
EMAIL_PATH = "/internal/daily_agent_evaluation_reports/email"
STEPS = ("collect", "backfill_preview", "slack", "email")


@dataclass(frozen=True)
class ReportsContext:
    """What the report jobs and ticks use: the database, flags, the job store, Rails and
    Slack (built lazily so a missing setting fails only the jobs that need it)."""

    sessions: sessionmaker[Session]
    flags: Flags
    jobs: JobStore
    rails: Callable[[], RailsClient]
    slack: Callable[[], SlackTarget]


class SlackNotConfigured(Unrecoverable):
    """No bot token or channel for the reports' Slack posts."""


def delivery_key(channel: str, state: JobState) -> str:
    """``<channel>/<job id>/<enqueued at (ms)>``: a re-drive after the job finished is a new
    job (a new enqueue time) and sends again; a retry of the same job keeps its key."""
    enqueued = state.client.hget(state.key, "created_at")
    return f"{channel}/{state.job_id}/{as_text(enqueued) if enqueued is not None else '0'}"


def run_report(context: ReportsContext, organization_id: int, params: ReportParams) -> Any:
    """The per-organization job body (``SendDailyAgentEvaluationReportForOrganizationJob``)."""
    state = JobState.current(context.jobs)
    with session_scope(context.sessions) as session:
        organization = session.get(Organization, organization_id)
        if organization is None or organization.discarded_at is not None:
            raise RecordMissing(f"organization {organization_id} does not exist")
        name, time_zone = organization.name, organization.time_zone
    engine = state.get("collect_engine")
    if engine is None:
        engine = collection.choose_engine(context.flags, organization_id)
        state.set(collect_engine=engine)
    report = _Report(context, state, organization_id, name, time_zone, params, engine)
    steps: list[tuple[str, Callable[[], Any]]] = [("collect", report.collect)]
    if params.queue_backfill:
        steps.append(("backfill_preview", report.backfill_preview))
    steps.append(("slack", report.slack))
    if params.send_email:
        steps.append(("email", report.email))
    return run_steps(state, steps)


@dataclass
class _Report:
    context: ReportsContext
    state: JobState
    organization_id: int
    name: str
    time_zone: str
    params: ReportParams
    engine: str

    @property
    def day(self) -> date:
        return self.params.date

    def _rows(self) -> list[ReportRow]:
        collected = self.state.completed_steps().get("collect") or {}
        return [ReportRow.from_json(row) for row in collected.get("rows", [])]

    def collect(self) -> dict[str, Any]:
        rows = collection.collect(
            self.engine,  # type: ignore[arg-type]
            sessions=self.context.sessions,
            rails=self.context.rails,
            organization_id=self.organization_id,
            day=self.day,
            time_zone=self.time_zone,
        )
        shadowed = self.context.flags.rollout(SHADOW_FLAG, organization_id=self.organization_id)
        if self.engine == "rails" and shadowed:
            comparison = shadow_collect(
                self.context.sessions, self.organization_id, self.day, self.time_zone, rows
            )
            self.state.set(shadow=comparison)
        return {"engine": self.engine, "rows": [row.as_json() for row in rows]}

    def backfill_preview(self) -> dict[str, Any]:
        return self.context.rails().post(
            BACKFILL_PREVIEW_PATH,
            {"organization_id": self.organization_id, "date": self.day.isoformat()},
        )

    def slack(self) -> dict[str, Any]:
        target = self.context.slack()
        text, blocks = report_blocks(self.name, self.organization_id, self.day, self._rows())
        key = delivery_key("slack", self.state)
        posted: dict[str, str] = {}

        def send() -> None:
            try:
                posted["ts"] = post_report(target, text, blocks)
            except SlackRefused as exc:
                raise NotDelivered(str(exc), _refusal_outcome(exc)) from exc

        outcome = deliver_once(
            self.context.sessions,
            key,
            send,
            what="slack report",
            context={"organization_id": self.organization_id, "job_id": self.state.job_id},
        )
        if outcome is DeliveryOutcome.UNCERTAIN:
            raise SlackDeliveryUncertain(key)
        return {"delivery_key": key, "outcome": outcome.value, **posted}

    def email(self) -> dict[str, Any]:
        key = delivery_key("email", self.state)
        answer = self.context.rails().post(
            EMAIL_PATH,
            {
                "organization_id": self.organization_id,
                "date": self.day.isoformat(),
                "source": self.params.source,
                "delivery_key": key,
            },
        )
        return {"delivery_key": key, "status": answer.get("status")}


class SlackDeliveryUncertain(Unrecoverable):
    """The Slack post's outcome is unknown: the claim stays unresolved for an operator."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"slack report delivery outcome uncertain ({key}): check the reports channel,"
            f" then `speedtier claims mark-delivered {key}` if it landed or `speedtier claims"
            f" release {key}` if not, and `speedtier reports retry <job id>`"
        )
        self.key = key


def _refusal_outcome(exc: SlackRefused) -> Retryable | Delay | Unrecoverable:
    if exc.status == 429 and exc.retry_after is not None:
        return Delay.after(exc.retry_after, reason="slack-retry-after")
    if exc.transient:
        return Retryable(str(exc))
    return Unrecoverable(str(exc))
