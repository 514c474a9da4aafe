"""Daily agent evaluation reports (seed 001): the two ticks, the per-organization report
job (collect, backfill preview, Slack, email), its enqueue route and its CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from flask import Blueprint

    from router.context import ServiceContext
    from services.reports.actors import ReportActors
    from shared.parity import ParityRun


def register(platform: ServiceContext) -> None:
    """The report family, the 04:00 and 20:00 UTC ticks and the enqueue route."""
    from services.reports.families import REPORT_JOB_PREFIX, TIER, families
    from services.reports.ticks import report_ticks

    actors = platform.defer(lambda: _actors(platform))
    for family in families(actors.handlers()):
        platform.add_family(family)
    for tick in report_ticks(lambda: actors.get().context, platform.router):
        platform.add_tick(tick)
    jobs = platform.brokers.of_tier(TIER).jobs

    def parity(since: datetime) -> list[ParityRun]:
        from services.reports.shadow import parity_source

        return parity_source(jobs, REPORT_JOB_PREFIX)(since)

    platform.add_parity("reports", parity)
    platform.add_routes(_routes)


def _actors(platform: ServiceContext) -> ReportActors:
    """The report job's actor body with its context (built at its first use)."""
    from services.reports.actors import ReportActors, build_context

    return ReportActors(build_context(platform))


def _routes() -> list[Blueprint]:
    from services.reports import routes

    return [routes.blueprint()]
