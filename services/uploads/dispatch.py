"""The check and process job bodies: Rails or native, and the Rails retry classification.

| failure | outcome |
| --- | --- |
| 404 / missing upload | completes as record_missing; nothing marked |
| 429 with Retry-After | delayed; no attempt spent |
| non-retryable (Rails 4xx, native terminal) | upload marked failed, Sentry exception, no retry |
| retryable, attempts left | retried after ``attemptsMade^4 * 1000 + 2000`` ms |
| retryable, fifth attempt | upload marked failed, Sentry exception |

With ``api2_conversation_upload_native_processing_shadow`` on, an XCALLY / Outreach Kaia
upload Rails reports completed is read again by the native rules, read-only, and the
differences are kept (:mod:`services.uploads.shadow`).

Marking failed goes through Rails' ``mark_failed`` (the model method) for Rails-processed
uploads, and through :func:`services.uploads.store.mark_failed` for native ones. The Sentry
event is grouped by ``["ConversationUploads", <job>, <error class>]``: the seed names the
Rails fingerprint without spelling it, so this is its assumed equivalent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.rails.client import RailsClient
from services.uploads import ledger, store
from services.uploads.call_metadata import NATIVE_SOURCES
from services.uploads.handoff import HANDED_OFF_SOURCE, CompletionHandOff
from services.uploads.native import handled_natively, process_upload
from services.uploads.object_store import ObjectStore
from services.uploads.shadow import shadow_process
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import ConversationUpload
from shared.errors import Delay, RecordMissing, Unrecoverable
from shared.observability import report_exception, warn
from shared.rollouts import (
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW,
)
from tiers.attempts import current_attempt
from tiers.job_store import JobStore
from tiers.policies import UPLOAD_RETRY

log = logging.getLogger(__name__)

UPLOADS_PATH = "/internal/conversation_uploads/{id}/{action}"


@dataclass(frozen=True)
class UploadJobs:
    """What the two families need: Rails, the database, object storage, the rollout flags
    (``rollout(flag, organization_id)``) and the router (the completion hand-off)."""

    rails: Callable[[], RailsClient]
    sessions: sessionmaker[Session]
    objects: Callable[[], ObjectStore]
    rollout: Callable[[str, int], bool]
    router: Router
    #: Where shadow runs are kept (:mod:`services.uploads.shadow`); None: no shadow runs.
    jobs: JobStore | None = None

    def check(self, organization_id: int, conversation_upload_id: int) -> None:
        self._guarded(
            "CheckNewUploadsJob",
            organization_id,
            conversation_upload_id,
            lambda: self._post(organization_id, conversation_upload_id, "check"),
            native=False,
        )

    def process(self, organization_id: int, conversation_upload_id: int, periodic: bool) -> None:
        source = self._source(organization_id, conversation_upload_id)
        native = handled_natively(self.rollout, organization_id, source)
        if native:

            def run() -> None:
                outcome = process_upload(
                    self.sessions,
                    self.objects(),
                    organization_id,
                    conversation_upload_id,
                    periodic=periodic,
                    hand_off=self._hand_off(organization_id, source),
                )
                if outcome.status == "completed":
                    self._completed(organization_id, conversation_upload_id)
        else:

            def run() -> None:
                action = "retry_direct" if periodic else "process_direct"
                answer = self._post(organization_id, conversation_upload_id, action)
                if answer.get("status") == "completed":
                    self._completed(organization_id, conversation_upload_id)
                    if self._shadowed(organization_id, source):
                        assert self.jobs is not None
                        shadow_process(
                            self.sessions, self.jobs, organization_id, conversation_upload_id
                        )

        self._guarded(
            "ProcessDirectUploadJob", organization_id, conversation_upload_id, run, native=native
        )

    def _shadowed(self, organization_id: int, source: str | None) -> bool:
        return (
            self.jobs is not None
            and source in NATIVE_SOURCES
            and self.rollout(CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW, organization_id)
        )

    def _hand_off(self, organization_id: int, source: str | None) -> CompletionHandOff | None:
        if source != HANDED_OFF_SOURCE:
            return None
        durable = self.rollout(CONVERSATION_UPLOAD_DURABLE_DELIVERY, organization_id)
        return CompletionHandOff(self.router, durable=durable)

    def _source(self, organization_id: int, upload_id: int) -> str | None:
        with session_scope(self.sessions) as session:
            row = session.execute(
                select(ConversationUpload.source).where(
                    ConversationUpload.organization_id == organization_id,
                    ConversationUpload.id == upload_id,
                )
            ).first()
        if row is None:
            raise RecordMissing(f"conversation upload {upload_id}")
        return row[0]

    def _post(self, organization_id: int, upload_id: int, action: str) -> dict[str, Any]:
        path = UPLOADS_PATH.format(id=upload_id, action=action)
        return self.rails().post(path, {"organization_id": organization_id})

    def _completed(self, organization_id: int, upload_id: int) -> None:
        """Best effort: the ``process`` ledger row follows the completed upload; a failed
        mark is left for the reconciler, never a failed job."""
        try:
            with session_scope(self.sessions) as session:
                ledger.mark_completed(session, organization_id, upload_id, "process", utcnow())
                session.commit()
        except Exception as exc:
            warn(
                "conversation upload ledger completed mark failed",
                fingerprint=["speedtier", "uploads", "ledger-completed"],
                conversation_upload_id=upload_id,
                error=str(exc),
            )

    def _guarded(
        self,
        job: str,
        organization_id: int,
        upload_id: int,
        run: Callable[[], object],
        *,
        native: bool,
    ) -> None:
        try:
            run()
        except (RecordMissing, Delay):
            raise
        except Unrecoverable as exc:
            self._fail(job, organization_id, upload_id, exc, native=native)
            raise
        except Exception as exc:
            if current_attempt(UPLOAD_RETRY).is_final:
                self._fail(job, organization_id, upload_id, exc, native=native)
            raise

    def _fail(
        self, job: str, organization_id: int, upload_id: int, exc: Exception, *, native: bool
    ) -> None:
        error_class = str(getattr(exc, "error_class", None) or type(exc).__name__)
        report_exception(
            exc,
            fingerprint=["ConversationUploads", job, error_class],
            tags={"organization_id": organization_id, "conversation_upload_id": upload_id},
        )
        try:
            with session_scope(self.sessions) as session:
                ledger.mark_failed(
                    session, organization_id, upload_id, "process", str(exc)[:2000], utcnow()
                )
                session.commit()
        except Exception:
            log.warning("upload %s: could not mark its ledger row", upload_id, exc_info=True)
        try:
            if native:
                with session_scope(self.sessions) as session:
                    store.mark_failed(
                        session, organization_id, upload_id, str(exc)[:2000], utcnow()
                    )
                    session.commit()
            else:
                path = UPLOADS_PATH.format(id=upload_id, action="mark_failed")
                body = {
                    "organization_id": organization_id,
                    "error": str(exc)[:2000],
                    "error_class": error_class,
                }
                self.rails().post(path, body)
        except Exception:
            log.warning("upload %s: could not mark it failed", upload_id, exc_info=True)
