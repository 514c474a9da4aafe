"""Daily agent evaluation reports (seed 001): the two ticks, the per-organization report
job (collect, backfill preview, Slack, email), its enqueue route and its CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Blueprint

    from router.context import ServiceContext


def register(platform: ServiceContext) -> None:
    """The report family, the 04:00 and 20:00 UTC ticks and the enqueue route."""
    from services.reports.actors import ReportActors, build_context
    from services.reports.families import REPORT_JOB_PREFIX, TIER, families
    from services.reports.shadow import parity_source
    from services.reports.ticks import report_ticks

    context = build_context(platform)
    for family in families(ReportActors(context)):
        platform.add_family(family)
    for tick in report_ticks(context, platform.router):
        platform.add_tick(tick)
    jobs = platform.brokers.of_tier(TIER).jobs
    platform.add_parity("reports", parity_source(jobs, REPORT_JOB_PREFIX))
    platform.add_routes(_routes)


def _routes() -> list[Blueprint]:
    from services.reports import routes

    return [routes.blueprint()]
