"""``POST /internal/daily_agent_evaluation_reports/enqueue``: Rails'
``Api2DailyAgentEvaluationReportEnqueuer`` for admin-triggered and post-backfill sends.

Each request names the organization, a literal ``date`` (never a sentinel: the caller knows
the day it means), ``send_email``, ``queue_backfill`` and ``source`` (``admin`` or
``backfill``; ``cron`` belongs to the ticks). A report already waiting or running answers
``deduplicated``.
"""

from __future__ import annotations

from typing import Literal

from flask import Blueprint

from services.apikit.enqueue import enqueue_blueprint
from services.reports.families import KIND, ReportParams


class RouteReportParams(ReportParams):
    """A report Rails asks for: ``source`` is ``admin`` or ``backfill`` (``cron`` belongs to
    the ticks), in the route's document as in its validation."""

    source: Literal["admin", "backfill"]


def blueprint() -> Blueprint:
    return enqueue_blueprint(
        "daily_agent_evaluation_reports",
        "/internal/daily_agent_evaluation_reports",
        (KIND,),
        "Enqueue daily agent evaluation reports (Rails' Api2DailyAgentEvaluationReportEnqueuer)",
        params={KIND: RouteReportParams},
    )
