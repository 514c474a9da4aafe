"""Thin actor bodies of the three upload families (:mod:`services.uploads.dispatch`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.uploads.completion import SyncCompletions
from services.uploads.dispatch import UploadJobs
from services.uploads.families import CHECK_KIND, COMPLETION_KIND, PROCESS_KIND


def build_handlers(jobs: UploadJobs, completions: SyncCompletions) -> dict[str, Callable[..., Any]]:
    def check_conversation_upload(organization_id: int, conversation_upload_id: int) -> None:
        jobs.check(organization_id, conversation_upload_id)

    def process_conversation_upload(
        organization_id: int, conversation_upload_id: int, periodic: bool = False
    ) -> None:
        jobs.process(organization_id, conversation_upload_id, periodic)

    def complete_provider_conversation_sync(
        organization_id: int, conversation_upload_id: int, conversation_id: int, sync_run_id: str
    ) -> None:
        completions.complete(organization_id, conversation_upload_id, conversation_id, sync_run_id)

    return {
        CHECK_KIND: check_conversation_upload,
        PROCESS_KIND: process_conversation_upload,
        COMPLETION_KIND: complete_provider_conversation_sync,
    }
