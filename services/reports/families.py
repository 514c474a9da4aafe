"""The daily agent evaluation report family: its request, job id, tier, pause flag.

Job id ``daily-agent-eval-report-<org>-<date>-<email|no-email>-<bf|no-bf>`` (seed 001), so a
second enqueue of the same report while it waits or runs is a no-op, and the email and
backfill variants of one day are distinct jobs.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from router.requests import JobRequest
from shared.inputs import PARAMS_CONFIG
from tiers.families import Family
from tiers.policies import RetryPolicy

if TYPE_CHECKING:
    from services.reports.actors import ReportActors

PAUSE_FLAG = "pause_api2_daily_agent_evaluation_reports"
KIND = "daily_agent_evaluation_report"
FAMILY = "daily_agent_eval_report"
#: Reports run in the maintenance tier (their job state lives in its Redis).
TIER = "maintenance"
#: Who asked for a report: the cron ticks, an admin, or the end of a backfill run.
Source = Literal["cron", "admin", "backfill"]
RETRY = RetryPolicy(max_attempts=5, base_seconds=30.0)
REPORT_JOB_PREFIX = "daily-agent-eval-report-"


class ReportParams(BaseModel):
    """One organization's report for one literal date (sentinels are resolved before)."""

    model_config = PARAMS_CONFIG

    date: date
    send_email: bool = False
    queue_backfill: bool = True
    #: Always given: the ticks send ``cron``, Rails' enqueuer ``admin`` or ``backfill``.
    source: Source


def report_job_id(organization_id: int, params: ReportParams) -> str:
    email = "email" if params.send_email else "no-email"
    backfill = "bf" if params.queue_backfill else "no-bf"
    return f"{REPORT_JOB_PREFIX}{organization_id}-{params.date.isoformat()}-{email}-{backfill}"


def report_request(
    organization_id: int,
    day: date,
    *,
    send_email: bool = False,
    queue_backfill: bool = True,
    source: Source = "cron",
) -> JobRequest:
    return JobRequest(
        KIND,
        organization_id,
        {
            "date": day.isoformat(),
            "send_email": send_email,
            "queue_backfill": queue_backfill,
            "source": source,
        },
    )


def families(actors: ReportActors) -> list[Family]:
    """The report family, bound to its actor body by reference."""
    return [
        Family(
            name=FAMILY,
            kind=KIND,
            handler=actors.daily_agent_eval_report,
            params=ReportParams,
            job_id=report_job_id,
            fixed_tier=TIER,
            pause_flag=PAUSE_FLAG,
            retry=RETRY,
            time_limit_seconds=900.0,  # a native collection may take its 5-minute timeout
        )
    ]
