"""The conversation-upload families of seed 001 (maintenance tier, five attempts with
``attemptsMade^4 * 1000 + 2000`` ms backoff, paused by ``pause_api2_conversation_upload_checks``).

- ``conversation_upload_check``: kind ``check_conversation_upload``, job
  ``conversation-upload-check-<id>``: a presign upload checked by Rails (blob_key lookup,
  30-minute expiry).
- ``conversation_upload_process``: kind ``process_conversation_upload``, job
  ``conversation-upload-process-<id>``: a direct upload processed by Rails
  (``process_direct``, or ``retry_direct`` for the periodic retry) or natively
  (``api2_conversation_upload_native_processing``). The controller's hand-off and the
  tick's re-drive share the id, so one collapses onto the other while it is queued.
- ``provider_conversation_sync_completion``: kind ``complete_provider_conversation_sync``,
  job ``provider_conversation_sync_completion_<sync_run_id>`` with ``sync_run_id =
  xcally-upload-<upload id>``: the XCALLY completion hand-off (ENG-2948), kept 7 days after it
  finishes so the pinned id still dedupes a late retry (:mod:`services.uploads.completion`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from router.requests import JobRequest
from shared.inputs import PARAMS_CONFIG, Id, conflicting
from tiers.families import Family
from tiers.policies import UPLOAD_RETRY

if TYPE_CHECKING:
    from services.uploads.actors import UploadActors

PAUSE_FLAG = "pause_api2_conversation_upload_checks"
CHECK_KIND = "check_conversation_upload"
PROCESS_KIND = "process_conversation_upload"
COMPLETION_KIND = "complete_provider_conversation_sync"
#: The completed job's record dedupes a late retry for this long (the seed's 7-day window).
COMPLETION_RETENTION_SECONDS = 7 * 86_400.0


def sync_run_id(upload_id: int) -> str:
    return f"xcally-upload-{upload_id}"


def completion_job_id(upload_id: int) -> str:
    return f"provider_conversation_sync_completion_{sync_run_id(upload_id)}"


SyncRunId = Annotated[
    str,
    Field(
        pattern=r"^xcally-upload-[1-9][0-9]{0,18}$",
        max_length=33,
        description="Pinned: `xcally-upload-<conversation_upload_id>` of this request; "
        "another upload's id answers 409 `conflicting_fields`.",
    ),
]


class _Strict(BaseModel):
    model_config = PARAMS_CONFIG


class CheckParams(_Strict):
    conversation_upload_id: Id


class ProcessParams(_Strict):
    conversation_upload_id: Id
    #: The periodic-retry scan's re-drive (Rails' ``retry_direct_upload!`` path).
    periodic: bool = False


class CompletionParams(_Strict):
    conversation_upload_id: Id
    #: The conversation the XCALLY processor created or reused (the ledger row's target).
    conversation_id: Id
    #: Pinned: ``xcally-upload-<conversation_upload_id>``; another upload's id is a conflict.
    sync_run_id: SyncRunId

    @field_validator("sync_run_id")
    @classmethod
    def _pinned(cls, value: str, info: ValidationInfo) -> str:
        upload_id = info.data.get("conversation_upload_id")
        if upload_id is not None and value != sync_run_id(upload_id):
            raise conflicting(f"must be {sync_run_id(upload_id)!r} (pinned to the upload)")
        return value


def completion_request(organization_id: int, upload_id: int, conversation_id: int) -> JobRequest:
    return JobRequest(
        COMPLETION_KIND,
        organization_id,
        {
            "conversation_upload_id": upload_id,
            "conversation_id": conversation_id,
            "sync_run_id": sync_run_id(upload_id),
        },
    )


def check_request(organization_id: int, upload_id: int) -> JobRequest:
    return JobRequest(CHECK_KIND, organization_id, {"conversation_upload_id": upload_id})


def process_request(organization_id: int, upload_id: int, *, periodic: bool = False) -> JobRequest:
    return JobRequest(
        PROCESS_KIND, organization_id, {"conversation_upload_id": upload_id, "periodic": periodic}
    )


def families(actors: UploadActors) -> list[Family]:
    """The three upload families, each bound to its actor body by reference."""
    return [
        Family(
            name="conversation_upload_check",
            kind=CHECK_KIND,
            handler=actors.check_conversation_upload,
            params=CheckParams,
            job_id=lambda _org, p: f"conversation-upload-check-{p.conversation_upload_id}",
            fixed_tier="maintenance",
            pause_flag=PAUSE_FLAG,
            retry=UPLOAD_RETRY,
        ),
        Family(
            name="conversation_upload_process",
            kind=PROCESS_KIND,
            handler=actors.process_conversation_upload,
            params=ProcessParams,
            job_id=lambda _org, p: f"conversation-upload-process-{p.conversation_upload_id}",
            fixed_tier="maintenance",
            pause_flag=PAUSE_FLAG,
            retry=UPLOAD_RETRY,
            time_limit_seconds=900.0,
        ),
        Family(
            name="provider_conversation_sync_completion",
            kind=COMPLETION_KIND,
            handler=actors.complete_provider_conversation_sync,
            params=CompletionParams,
            job_id=lambda _org, p: f"provider_conversation_sync_completion_{p.sync_run_id}",
            fixed_tier="maintenance",
            # No kill switch of its own: its revert is api2_conversation_upload_sync_completion
            # (checked by the route and again when the job runs).
            retry=UPLOAD_RETRY,
            retention_seconds=COMPLETION_RETENTION_SECONDS,
            keep_finished=True,
        ),
    ]
