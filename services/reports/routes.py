"""``POST /internal/daily_agent_evaluation_reports/enqueue``: Rails'
``Api2DailyAgentEvaluationReportEnqueuer`` for admin-triggered and post-backfill sends.

Each request names the organization, a literal ``date`` (never a sentinel: the caller knows
the day it means), ``send_email``, ``queue_backfill`` and ``source`` (``admin`` or
``backfill``; ``cron`` belongs to the ticks). A report already waiting or running answers
``deduplicated``.
"""

from __future__ import annotations

from flask import Blueprint

from router.requests import JobRequest
from services.apikit.enqueue import enqueue_blueprint
from services.reports.families import KIND
from shared.errors import ValidationFailed

ROUTE_SOURCES = ("admin", "backfill")


def _explicit_sources(requests: list[JobRequest]) -> list[JobRequest]:
    errors = {
        f"requests[{index}].source": f"must be one of {', '.join(ROUTE_SOURCES)}"
        for index, request in enumerate(requests)
        if request.params.get("source") not in ROUTE_SOURCES
    }
    if errors:
        raise ValidationFailed(errors)
    return requests


def blueprint() -> Blueprint:
    return enqueue_blueprint(
        "daily_agent_evaluation_reports",
        "/internal/daily_agent_evaluation_reports",
        (KIND,),
        "Enqueue daily agent evaluation reports (Rails' Api2DailyAgentEvaluationReportEnqueuer)",
        prepare=_explicit_sources,
    )
