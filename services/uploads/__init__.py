"""Conversation uploads (seed 001): the 30-minute scan, the check and process families
(Rails or native processing of XCALLY / Outreach Kaia direct uploads), the XCALLY
completion family, their enqueue routes, the delivery-ledger reconciler and the validation
checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from flask import Blueprint

    from router.context import ServiceContext
    from services.uploads.actors import UploadActors
    from shared.parity import ParityRun


def register(platform: ServiceContext) -> None:
    from services.uploads.families import families
    from services.uploads.ticks import upload_scan_tick

    # The upload families run in the maintenance tier: their records are in its Redis.
    jobs_store = platform.brokers.of_tier("maintenance").jobs
    actors = platform.defer(lambda: _actors(platform))
    for family in families(actors.handlers()):
        platform.add_family(family)

    def job_state(job_id: str) -> str | None:
        return (jobs_store.record(job_id) or {}).get("state")

    def parity(since: datetime) -> list[ParityRun]:
        from services.uploads.shadow import parity_source

        return parity_source(jobs_store)(since)

    platform.add_tick(upload_scan_tick(platform.sessions, platform.router, job_state, jobs_store))
    platform.add_parity("uploads", parity)
    platform.add_routes(_routes)


def _actors(platform: ServiceContext) -> UploadActors:
    """The actor bodies: the upload jobs (Rails, the object store, the rollout flags) and the
    sync completions (built at their first use)."""
    from services.rails.client import RailsClient
    from services.uploads.actors import UploadActors
    from services.uploads.completion import SyncCompletions
    from services.uploads.completion_effects import NativeEffects, native_effects
    from services.uploads.dispatch import UploadJobs
    from services.uploads.object_store import ObjectStore, object_store
    from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION

    settings = platform.settings
    clients: list[RailsClient] = []
    stores: list[ObjectStore] = []

    def rails() -> RailsClient:
        """Built on first use: an unset RAILS_INTERNAL_URL fails only the jobs calling Rails."""
        if not clients:
            clients.append(RailsClient.from_settings(settings))
        return clients[0]

    def objects() -> ObjectStore:
        if not stores:
            stores.append(object_store(settings))
        return stores[0]

    def rollout(flag: str, organization_id: int) -> bool:
        return platform.flags.rollout(flag, organization_id=organization_id)

    def completion_enabled(organization_id: int) -> bool:
        return platform.flags.rollout(
            CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id=organization_id
        )

    jobs_store = platform.brokers.of_tier("maintenance").jobs
    jobs = UploadJobs(rails, platform.sessions, objects, rollout, platform.router, jobs=jobs_store)
    completions = SyncCompletions(
        rails,
        platform.sessions,
        completion_enabled,
        native=native_effects(settings.native_effects),
        effects=NativeEffects(platform.sessions, platform.router.enqueue),
    )
    return UploadActors(jobs, completions)


def _routes() -> list[Blueprint]:
    from services.uploads import routes

    return [routes.blueprint(), routes.completion_blueprint()]
