"""The conversation uploads' SQL for native processing: claims, status transitions, the
stored source file. Every statement filters on ``organization_id``.

| transition | from | to | also |
| --- | --- | --- | --- |
| :func:`claim` | pending, processing | processing | ``processing_started_at`` if pending |
| :func:`claim`, periodic | failed (eligible), stuck | processing | ``periodic_retry_count + 1`` |
| :func:`complete` | processing | completed | ``processed_at``; clears the error columns |
| :func:`record_retry` | processing | processing | ``last_processing_error*`` |
| :func:`mark_failed` | pending, processing | failed | ``last_processing_error*`` |

"Stuck": in processing for more than ``STUCK_PROCESSING``; "eligible": see
:func:`periodic_retry_eligible`. :func:`complete` also clears ``periodic_retry_count``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from shared.db.models import ActiveStorageAttachment, ActiveStorageBlob, ConversationUpload
from shared.db.tenant import select_scoped

#: Periodic retries an upload gets before it stays failed (Rails' MAX_PERIODIC_RETRIES).
MAX_PERIODIC_RETRIES = 3
#: The least time between a failure and its periodic retry.
MIN_RETRY_INTERVAL = timedelta(minutes=30)
#: An upload in ``processing`` this long is stuck: the periodic retry takes it over.
STUCK_PROCESSING = timedelta(minutes=30)


@dataclass(frozen=True)
class StoredFile:
    blob_id: int
    key: str
    filename: str


@dataclass(frozen=True)
class Claimed:
    """An upload this pass now processes."""

    upload_id: int
    source: str
    metadata: dict[str, Any]
    file: StoredFile


def stored_file(session: Session, upload_id: int) -> StoredFile | None:
    """The upload's ``file`` attachment (Active Storage), if it is still there."""
    row = session.execute(
        select(ActiveStorageBlob.id, ActiveStorageBlob.key, ActiveStorageBlob.filename)
        .join(ActiveStorageAttachment, ActiveStorageAttachment.blob_id == ActiveStorageBlob.id)
        .where(
            ActiveStorageAttachment.record_type == "ConversationUpload",
            ActiveStorageAttachment.name == "file",
            ActiveStorageAttachment.record_id == upload_id,
        )
        .order_by(ActiveStorageAttachment.id)
        .limit(1)
    ).first()
    return None if row is None else StoredFile(row[0], row[1], row[2])


def periodic_retry_eligible(upload: ConversationUpload, now: datetime) -> bool:
    """``retry_direct_upload!``'s guard: a failed upload under the retry budget whose last
    failure is old enough, or one stuck in processing (the stored file is checked apart)."""
    if upload.upload_type != "direct":
        return False
    if upload.status == "processing":
        started = upload.processing_started_at or upload.updated_at
        return started <= now - STUCK_PROCESSING
    if upload.status != "failed" or upload.periodic_retry_count >= MAX_PERIODIC_RETRIES:
        return False
    failed_at = upload.last_processing_error_at
    return failed_at is None or failed_at <= now - MIN_RETRY_INTERVAL


def lock_upload(
    session: Session, organization_id: int, upload_id: int
) -> ConversationUpload | None:
    query = select_scoped(ConversationUpload, organization_id=organization_id)
    query = query.where(ConversationUpload.id == upload_id).with_for_update()
    return session.execute(query).scalar()


def claim(
    session: Session, organization_id: int, upload_id: int, now: datetime, *, periodic: bool
) -> Claimed | str:
    """Move the upload to ``processing`` for this pass, or say why not (a short reason).

    The caller commits. A missing stored file is reported as ``"file missing"`` so the
    caller can fail the upload terminally.
    """
    upload = lock_upload(session, organization_id, upload_id)
    if upload is None:
        return "missing"
    if upload.upload_type != "direct":
        return "not a direct upload"
    if periodic:
        if not periodic_retry_eligible(upload, now):
            return f"not eligible for a periodic retry ({upload.status})"
    elif upload.status not in ("pending", "processing"):
        return f"already {upload.status}"
    file = stored_file(session, upload_id)
    if file is None:
        return "file missing"
    if periodic:
        upload.periodic_retry_count += 1
    if upload.status != "processing" or periodic:
        upload.processing_started_at = now
    upload.status = "processing"
    upload.updated_at = now
    return Claimed(upload.id, upload.source or "", dict(upload.metadata_ or {}), file)


def _set(
    session: Session, organization_id: int, upload_id: int, statuses: tuple[str, ...], **values: Any
) -> bool:
    result = session.execute(
        update(ConversationUpload)
        .where(
            ConversationUpload.organization_id == organization_id,
            ConversationUpload.id == upload_id,
            ConversationUpload.status.in_(statuses),
        )
        .values(**values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def complete(
    session: Session, organization_id: int, upload_id: int, conversation_id: int, now: datetime
) -> bool:
    """processing -> completed, clearing the periodic-retry metadata."""
    return _set(
        session,
        organization_id,
        upload_id,
        ("processing",),
        status="completed",
        conversation_id=conversation_id,
        processed_at=now,
        periodic_retry_count=0,
        last_processing_error=None,
        last_processing_error_at=None,
        updated_at=now,
    )


def record_retry(
    session: Session, organization_id: int, upload_id: int, error: str, now: datetime
) -> bool:
    """Remember a transient failure; the upload stays ``processing`` for the next attempt."""
    return _set(
        session,
        organization_id,
        upload_id,
        ("processing",),
        last_processing_error=error,
        last_processing_error_at=now,
        updated_at=now,
    )


def mark_failed(
    session: Session, organization_id: int, upload_id: int, error: str, now: datetime
) -> bool:
    """A terminal failure (or exhausted attempts): ``failed`` with the error."""
    return _set(
        session,
        organization_id,
        upload_id,
        ("pending", "processing"),
        status="failed",
        last_processing_error=error,
        last_processing_error_at=now,
        updated_at=now,
    )


#: Pending uploads older than this are no longer polled (CheckNewUploadsJob's recent window).
RECENT_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class Candidate:
    """An upload the 30-minute scan looks at."""

    organization_id: int
    upload_id: int
    upload_type: str
    status: str
    created_at: datetime
    has_file: bool


def scan_candidates(session: Session, now: datetime) -> list[Candidate]:
    """Pending uploads inside the recent window, plus direct uploads that the periodic retry
    may take (failed under the retry budget, or stuck in processing), oldest first.

    A platform-wide scan (the tick), so not tenant-scoped; each candidate carries its
    organization, and the jobs it becomes are scoped by it.
    """
    has_file = (
        select(ActiveStorageAttachment.id)
        .where(
            ActiveStorageAttachment.record_type == "ConversationUpload",
            ActiveStorageAttachment.name == "file",
            ActiveStorageAttachment.record_id == ConversationUpload.id,
        )
        .exists()
    )
    pending = (ConversationUpload.status == "pending") & (
        ConversationUpload.created_at >= now - RECENT_WINDOW
    )
    retry_due = (ConversationUpload.last_processing_error_at.is_(None)) | (
        ConversationUpload.last_processing_error_at <= now - MIN_RETRY_INTERVAL
    )
    failed = (
        (ConversationUpload.status == "failed")
        & (ConversationUpload.periodic_retry_count < MAX_PERIODIC_RETRIES)
        & retry_due
    )
    started = func.coalesce(ConversationUpload.processing_started_at, ConversationUpload.updated_at)
    stuck = (ConversationUpload.status == "processing") & (started <= now - STUCK_PROCESSING)
    periodic = (ConversationUpload.upload_type == "direct") & (failed | stuck)
    rows = session.execute(
        select(
            ConversationUpload.organization_id,
            ConversationUpload.id,
            ConversationUpload.upload_type,
            ConversationUpload.status,
            ConversationUpload.created_at,
            has_file,
        )
        .where(pending | periodic)
        .order_by(ConversationUpload.created_at, ConversationUpload.id)
    ).all()
    return [Candidate(*row) for row in rows]
