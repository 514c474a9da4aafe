"""Thin actor bodies of the maintenance families: each calls one Rails endpoint (or runs
the counter-cache repair) and lets the outcome propagate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.maintenance.counter_caches import CounterCacheRun
from services.rails.client import RailsClient
from shared.observability import tag_current_scope
from tiers.job_state import JobState
from tiers.job_store import JobStore


@dataclass(frozen=True)
class MaintenanceActors:
    rails: Callable[[], RailsClient]
    jobs: JobStore
    counter_caches: CounterCacheRun

    def sync_unit21(self, organization_id: int, organization_data_source_id: int) -> None:
        # Tags the failure Sentry's Dramatiq integration reports for this job.
        tag_current_scope(
            organization_data_source_id=organization_data_source_id,
            organization_id=organization_id,
        )
        path = f"/internal/organization_data_sources/{organization_data_source_id}/sync_unit21"
        payload = self.rails().post(path, {"organization_id": organization_id})
        JobState.current(self.jobs).set(sync=payload)

    def summarize_conversation(self, organization_id: int, conversation_id: int) -> None:
        path = f"/internal/conversations/{conversation_id}/summarize"
        payload = self.rails().post(path, {"organization_id": organization_id})
        JobState.current(self.jobs).set(summary=payload)

    def fix_counter_caches(self) -> None:
        self.counter_caches.run(JobState.current(self.jobs))
