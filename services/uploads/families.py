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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from router.requests import JobRequest
from shared.inputs import Id
from tiers.families import Family
from tiers.policies import UPLOAD_RETRY

PAUSE_FLAG = "pause_api2_conversation_upload_checks"
CHECK_KIND = "check_conversation_upload"
PROCESS_KIND = "process_conversation_upload"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckParams(_Strict):
    conversation_upload_id: Id


class ProcessParams(_Strict):
    conversation_upload_id: Id
    #: The periodic-retry scan's re-drive (Rails' ``retry_direct_upload!`` path).
    periodic: bool = False


def check_request(organization_id: int, upload_id: int) -> JobRequest:
    return JobRequest(CHECK_KIND, organization_id, {"conversation_upload_id": upload_id})


def process_request(organization_id: int, upload_id: int, *, periodic: bool = False) -> JobRequest:
    return JobRequest(
        PROCESS_KIND, organization_id, {"conversation_upload_id": upload_id, "periodic": periodic}
    )


def families(handlers: dict[str, Callable[..., Any]]) -> list[Family]:
    return [
        Family(
            name="conversation_upload_check",
            kind=CHECK_KIND,
            handler=handlers[CHECK_KIND],
            params=CheckParams,
            job_id=lambda _org, p: f"conversation-upload-check-{p.conversation_upload_id}",
            fixed_tier="maintenance",
            pause_flag=PAUSE_FLAG,
            retry=UPLOAD_RETRY,
        ),
        Family(
            name="conversation_upload_process",
            kind=PROCESS_KIND,
            handler=handlers[PROCESS_KIND],
            params=ProcessParams,
            job_id=lambda _org, p: f"conversation-upload-process-{p.conversation_upload_id}",
            fixed_tier="maintenance",
            pause_flag=PAUSE_FLAG,
            retry=UPLOAD_RETRY,
            time_limit_seconds=900.0,
        ),
    ]
