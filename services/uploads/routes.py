"""``POST /internal/conversation_uploads/enqueue``: the direct-upload hand-off Rails'
``Api2ConversationUploadEnqueuer`` makes (``ConversationUploadsController#create`` and any
other direct-upload producer) instead of ``ProcessDirectUploadJob.perform_later``.

The shared enqueue route: 401 without the token, 400 naming each bad field, 202 with each
job's outcome (``added``, or ``deduplicated`` onto a queued ``conversation-upload-process-<id>``),
503 when Redis cannot take the job (Rails' proven delivery error).
"""

from __future__ import annotations

from flask import Blueprint

from services.apikit.enqueue import enqueue_blueprint
from services.uploads.families import PROCESS_KIND


def blueprint() -> Blueprint:
    return enqueue_blueprint(
        "conversation_uploads",
        "/internal/conversation_uploads",
        (PROCESS_KIND,),
        "Enqueue a direct upload's processing (Rails' Api2ConversationUploadEnqueuer)",
    )
