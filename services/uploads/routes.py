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

from flask import Blueprint, g
from flask.typing import ResponseReturnValue

from router.requests import JobRequest
from services.apikit.context import current_platform
from services.apikit.enqueue import EnqueueContract, describe_enqueue, enqueue_requests
from services.uploads import ledger
from services.uploads.families import PROCESS_KIND
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.observability import warn

log = logging.getLogger(__name__)

SUMMARY = "Enqueue a direct upload's processing (Rails' Api2ConversationUploadEnqueuer)"


def _remember(requests: list[JobRequest]) -> list[JobRequest]:
    g.upload_requests = requests
    return requests


def mark_accepted(requests: list[JobRequest]) -> None:
    """Best effort: the process rows of the enqueued uploads become ``accepted``."""
    sessions = current_platform().sessions
    try:
        with session_scope(sessions) as session:
            now = utcnow()
            for item in requests:
                upload_id = int(item.params["conversation_upload_id"])
                ledger.mark_accepted(session, int(item.organization_id or 0), upload_id, now)
            session.commit()
    except Exception as exc:
        warn(
            "conversation upload ledger accepted mark failed",
            fingerprint=["speedtier", "uploads", "ledger-accepted"],
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
