"""Thin actor bodies of the three upload families (:mod:`services.uploads.dispatch`)."""

from __future__ import annotations

from dataclasses import dataclass

from services.uploads.completion import SyncCompletions
from services.uploads.dispatch import UploadJobs


@dataclass(frozen=True)
class UploadActors:
    """The three actor bodies, as methods bound to the upload jobs and the completions."""

    jobs: UploadJobs
    completions: SyncCompletions

    def check_conversation_upload(self, organization_id: int, conversation_upload_id: int) -> None:
        self.jobs.check(organization_id, conversation_upload_id)

    def process_conversation_upload(
        self, organization_id: int, conversation_upload_id: int, periodic: bool = False
    ) -> None:
        self.jobs.process(organization_id, conversation_upload_id, periodic)

    def complete_provider_conversation_sync(
        self,
        organization_id: int,
        conversation_upload_id: int,
        conversation_id: int,
        sync_run_id: str,
    ) -> None:
        self.completions.complete(
            organization_id, conversation_upload_id, conversation_id, sync_run_id
        )
