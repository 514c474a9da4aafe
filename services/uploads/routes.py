"""``POST /internal/conversation_uploads/enqueue``: the direct-upload hand-off Rails'
``Api2ConversationUploadEnqueuer`` makes (``ConversationUploadsController#create`` and any
other direct-upload producer) instead of ``ProcessDirectUploadJob.perform_later``.

The shared enqueue route: 401 without the token, 400 naming each bad field, 202 with each
job's outcome (``added``, or ``deduplicated`` onto a queued ``conversation-upload-process-<id>``),
503 when Redis cannot take the job (Rails' proven delivery error).

After the 202 is decided, the upload's ``process`` ledger row (durable delivery) is marked
``accepted``: best effort, since the job is already durable; a failed mark is logged and
reported to Sentry and left for the reconciler, never turned into a 5xx.
"""

from __future__ import annotations

import logging

from flask import Blueprint, g, jsonify
from flask.typing import ResponseReturnValue

from router.requests import JobRequest
from services.apikit.context import current_platform
from services.apikit.enqueue import (
    ENQUEUE_RESPONSES,
    EnqueueContract,
    describe_enqueue,
    enqueue_requests,
)
from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.uploads import ledger
from services.uploads.families import COMPLETION_KIND, PROCESS_KIND
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import SpeedtierError
from shared.observability import warn
from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION

log = logging.getLogger(__name__)

SUMMARY = "Enqueue a direct upload's processing (Rails' Api2ConversationUploadEnqueuer)"


def _remember(requests: list[JobRequest]) -> list[JobRequest]:
    g.upload_requests = requests
    return requests


COMPLETION_SUMMARY = (
    "Enqueue an XCALLY upload's conversation completion "
    "(Rails' Api2ProviderConversationSyncCompletionEnqueuer)"
)


class CompletionRefused(SpeedtierError):
    """The rollout flag is off for an organization of the batch: nothing was enqueued."""

    def __init__(self, organization_ids: list[int]) -> None:
        super().__init__(
            f"{CONVERSATION_UPLOAD_SYNC_COMPLETION} is off for organization(s) "
            + ", ".join(str(org) for org in organization_ids)
        )
        self.organization_ids = organization_ids


def mark_accepted(requests: list[JobRequest], kind: str = "process") -> None:
    """Best effort: the ``kind`` rows of the enqueued uploads become ``accepted``."""
    sessions = current_platform().sessions
    try:
        with session_scope(sessions) as session:
            now = utcnow()
            for item in requests:
                upload_id = int(item.params["conversation_upload_id"])
                ledger.mark_accepted(session, int(item.organization_id or 0), upload_id, now, kind)
            session.commit()
    except Exception as exc:
        warn(
            "conversation upload ledger accepted mark failed",
            fingerprint=["speedtier", "uploads", "ledger-accepted"],
            kind=kind,
            error=str(exc),
        )


def blueprint() -> Blueprint:
    blueprint = Blueprint(
        "conversation_uploads", __name__, url_prefix="/internal/conversation_uploads"
    )
    contract = EnqueueContract("ConversationUploadsEnqueueBody", frozenset((PROCESS_KIND,)))

    @blueprint.post("/enqueue")
    @describe_enqueue(SUMMARY, contract)
    def enqueue() -> ResponseReturnValue:
        answer = enqueue_requests(contract, _remember)
        mark_accepted(g.get("upload_requests", []))
        return answer

    return blueprint


def _flagged(requests: list[JobRequest]) -> list[JobRequest]:
    """Refuse the whole batch when the flag is off for any of its organizations, so Rails
    sees a proven rejection and takes its GoodJob fallback instead of a job that would skip."""
    flags = current_platform().flags
    off = sorted(
        {
            int(item.organization_id or 0)
            for item in requests
            if not flags.rollout(
                CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id=int(item.organization_id or 0)
            )
        }
    )
    if off:
        raise CompletionRefused(off)
    return _remember(requests)


def completion_blueprint() -> Blueprint:
    """``POST /internal/provider_conversation_sync_completions/enqueue`` (ENG-2948).

    401 without the token; 400 naming each bad field; 409 ``conflicting_fields`` when a
    ``sync_run_id`` is not ``xcally-upload-<conversation_upload_id>`` of its request (both are
    proven rejections); 409 ``sync_completion_disabled`` when
    ``api2_conversation_upload_sync_completion`` is off for an organization of the batch (a
    proven rejection: Rails' fallback is allowed, nothing was enqueued); 503 when Redis is
    down; 202 ``added``, or ``deduplicated`` onto the pinned
    ``provider_conversation_sync_completion_xcally-upload-<id>`` while it is queued, running
    or finished within its 7-day retention. Then the upload's ``sync_completion`` ledger row
    is marked ``accepted`` (best effort).
    """
    blueprint = Blueprint(
        "provider_conversation_sync_completions",
        __name__,
        url_prefix="/internal/provider_conversation_sync_completions",
    )
    contract = EnqueueContract(
        "ProviderConversationSyncCompletionsEnqueueBody", frozenset((COMPLETION_KIND,))
    )

    @blueprint.post("/enqueue")
    @describe(
        COMPLETION_SUMMARY,
        description="Kind: `complete_provider_conversation_sync`, pinned by `sync_run_id = "
        "xcally-upload-<conversation_upload_id>`; the finished job is kept 7 days so a late "
        "retry is deduplicated. 409 is a proven rejection (Rails' fallback may run).",
        body=contract.body_model,
        responses={
            **ENQUEUE_RESPONSES,
            409: (
                "api2_conversation_upload_sync_completion is off for an organization of the "
                "batch (`sync_completion_disabled`), or a `sync_run_id` names another upload "
                "(`conflicting_fields`); nothing was enqueued.",
                ErrorBody,
            ),
        },
    )
    def enqueue() -> ResponseReturnValue:
        try:
            answer = enqueue_requests(contract, _flagged)
        except CompletionRefused as exc:
            return jsonify(error="sync_completion_disabled", message=str(exc)), 409
        mark_accepted(g.get("upload_requests", []), "sync_completion")
        return answer

    return blueprint
