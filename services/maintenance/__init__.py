"""Platform upkeep and seed 001's routine maintenance families, on the maintenance tier:
the slot reaper, the expired-evaluation sweep, Unit21 sync, conversation summaries and the
counter-cache repair."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from flask import Blueprint

    from router.context import ServiceContext
    from services.maintenance.actors import MaintenanceActors
    from services.rails.client import RailsClient
    from tiers.job_store import JobStore


def register(platform: ServiceContext) -> None:
    from services.maintenance import ticks
    from services.maintenance.families import families
    from services.maintenance.shadow import parity_source

    settings = platform.settings
    clients: list[RailsClient] = []

    def rails() -> RailsClient:
        """Built on first use: an unset RAILS_INTERNAL_URL fails only the jobs calling Rails."""
        from services.rails.client import RailsClient

        if not clients:
            clients.append(RailsClient.from_settings(settings))
        return clients[0]

    # Every family and tick here runs in the maintenance tier: their job state is there.
    jobs = platform.brokers.of_tier("maintenance").jobs
    actors = platform.defer(lambda: _actors(platform, rails, jobs))
    for family in families(actors.handlers()):
        platform.add_family(family)
    platform.add_tick(ticks.group_slot_reaper([b.jobs for b, _ in platform.brokers.serving()]))
    platform.add_tick(ticks.expired_evaluations_tick(rails, jobs))
    platform.add_tick(ticks.unit21_tick(platform.sessions, platform.router))
    platform.add_tick(ticks.counter_cache_tick(platform.sessions, platform.router))
    platform.add_parity("maintenance", parity_source(jobs))
    platform.add_routes(_routes)


def _actors(
    platform: ServiceContext, rails: Callable[[], RailsClient], jobs: JobStore
) -> MaintenanceActors:
    """The actor bodies with the counter-cache run (built at their first use)."""
    from services.maintenance.actors import MaintenanceActors
    from services.maintenance.counter_caches import CounterCacheRun

    run = CounterCacheRun(
        # the engine the sessions are bound to: the lock needs a connection of its own
        engine=platform.sessions.kw["bind"],
        sessions=platform.sessions,
        rails=rails,
        flags=platform.flags,
        region=platform.settings.region,
        jobs=jobs,
    )
    return MaintenanceActors(rails, jobs, run)


def _routes() -> list[Blueprint]:
    from services.maintenance import routes

    return list(routes.blueprints())
