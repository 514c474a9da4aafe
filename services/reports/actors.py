"""The report job's actor body and the context it runs with (thin: the work is in
:mod:`services.reports.report_job`)."""

from __future__ import annotations

from dataclasses import dataclass

from router.context import ServiceContext
from services.rails.client import RailsClient
from services.reports.families import TIER, ReportParams
from services.reports.report_job import ReportsContext, SlackNotConfigured, run_report
from services.reports.slack import SlackTarget
from shared.config import Settings


def slack_target(settings: Settings) -> SlackTarget:
    """The reports' Slack target from the settings.

    Raises:
      SlackNotConfigured: ``SLACK_BOT_TOKEN`` or ``SPEEDTIER_REPORTS_SLACK_CHANNEL`` unset.
    """
    token = settings.slack_bot_token
    if token is None or not settings.reports_slack_channel:
        raise SlackNotConfigured(
            "SLACK_BOT_TOKEN and SPEEDTIER_REPORTS_SLACK_CHANNEL must be set to post reports"
        )
    return SlackTarget(
        token=token.get_secret_value(),
        channel=settings.reports_slack_channel,
        base_url=settings.slack_api_url,
        timeout_seconds=settings.http_timeout_seconds,
    )


def build_context(platform: ServiceContext) -> ReportsContext:
    settings = platform.settings
    return ReportsContext(
        sessions=platform.sessions,
        flags=platform.flags,
        jobs=platform.brokers.of_tier(TIER).jobs,
        rails=lambda: RailsClient.from_settings(settings),
        slack=lambda: slack_target(settings),
    )


@dataclass(frozen=True)
class ReportActors:
    """The report job's actor body, as a method bound to its context."""

    context: ReportsContext

    def daily_agent_eval_report(
        self,
        organization_id: int,
        date: str,
        send_email: bool = False,
        queue_backfill: bool = True,
        source: str = "cron",
    ) -> None:
        params = ReportParams.model_validate(
            {
                "date": date,
                "send_email": send_email,
                "queue_backfill": queue_backfill,
                "source": source,
            }
        )
        run_report(self.context, organization_id, params)
