"""The call detail's ``recording`` attachment, inserted once however many processors race.

The WAV is written to object storage before this runs, outside any transaction, under a key
derived from the upload and the call detail (:func:`recording_key`): a processor killed
after the write and before the insert leaves an object its retry overwrites and attaches,
never a second one. The insert itself is one short transaction:

1. ``SELECT ... FOR UPDATE`` on the exact call-detail row (concurrent processors queue here);
2. re-check for an existing ``recording`` attachment: if there is one, the object this pass
   wrote is an orphan unless the existing blob uses the same key, and is deleted;
3. otherwise insert the blob and the attachment (for a recording that was not converted, the
   attachment shares the upload's blob, as in Rails) and commit.

If the insert fails, the object this pass wrote is deleted before the error propagates
(unless a blob row names it after all: a commit whose answer was lost).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import string
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.object_store import ObjectStore
from shared.db.engine import session_scope
from shared.db.models import ActiveStorageAttachment, ActiveStorageBlob, CallDetail
from shared.errors import RecordMissing, SpeedtierError

log = logging.getLogger(__name__)

RECORD_TYPE = "CallDetail"
ATTACHMENT_NAME = "recording"
_BASE36 = string.digits + string.ascii_lowercase


def recording_key(upload_id: int, call_detail_id: int) -> str:
    """A 28-character lowercase base-36 key, like Active Storage's, fixed per (upload, call)."""
    digest = hashlib.sha256(f"conversation-upload-recording:{upload_id}:{call_detail_id}".encode())
    number = int.from_bytes(digest.digest(), "big")
    chars = []
    for _ in range(28):
        number, remainder = divmod(number, 36)
        chars.append(_BASE36[remainder])
    return "".join(chars)


@dataclass(frozen=True)
class NewBlob:
    """A WAV this pass wrote to storage under ``key``."""

    key: str
    filename: str
    byte_size: int
    checksum: str
    duration_ms: int
    content_type: str = "audio/x-wav"

    @classmethod
    def of(
        cls, key: str, filename: str, data: bytes, duration_ms: int, content_type: str
    ) -> NewBlob:
        checksum = base64.b64encode(
            hashlib.md5(data).digest()
        ).decode()  # Active Storage's checksum
        return cls(key, filename, len(data), checksum, duration_ms, content_type)


@dataclass(frozen=True)
class Attached:
    attachment_id: int
    blob_id: int
    created: bool


def _existing(session: Session, call_detail_id: int) -> tuple[int, int, str] | None:
    row = session.execute(
        select(ActiveStorageAttachment.id, ActiveStorageBlob.id, ActiveStorageBlob.key)
        .join(ActiveStorageBlob, ActiveStorageBlob.id == ActiveStorageAttachment.blob_id)
        .where(
            ActiveStorageAttachment.record_type == RECORD_TYPE,
            ActiveStorageAttachment.record_id == call_detail_id,
            ActiveStorageAttachment.name == ATTACHMENT_NAME,
        )
        .order_by(ActiveStorageAttachment.id)
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1], row[2])


def _delete_orphan(store: ObjectStore, key: str) -> None:
    try:
        store.delete(key)
    except SpeedtierError:
        log.warning("could not delete orphaned recording object %s", key, exc_info=True)


def attach_recording(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    organization_id: int,
    call_detail_id: int,
    blob: NewBlob | int,
) -> Attached:
    """Attach ``blob`` (a WAV written under its key, or an existing blob id) as the call
    detail's recording, unless one is already there.

    Raises:
      RecordMissing: the call detail is gone (or another organization's).
    """
    wrote = blob.key if isinstance(blob, NewBlob) else None
    try:
        with session_scope(sessions) as session:
            locked = session.execute(
                select(CallDetail.id)
                .where(CallDetail.id == call_detail_id)
                .where(CallDetail.organization_id == organization_id)
                .with_for_update()
            ).scalar()
            if locked is None:
                raise RecordMissing(f"call detail {call_detail_id}")
            existing = _existing(session, call_detail_id)
            if existing is not None:
                if wrote is not None and wrote != existing[2]:
                    _delete_orphan(store, wrote)
                return Attached(existing[0], existing[1], created=False)
            blob_id = blob if isinstance(blob, int) else _insert_blob(session, store, blob)
            attachment = ActiveStorageAttachment(
                name=ATTACHMENT_NAME,
                record_type=RECORD_TYPE,
                record_id=call_detail_id,
                blob_id=blob_id,
            )
            session.add(attachment)
            session.flush()
            attached = Attached(attachment.id, blob_id, created=True)
            session.commit()
            return attached
    except Exception:
        if wrote is not None:
            _delete_if_unattached(sessions, store, wrote)
        raise


def _delete_if_unattached(sessions: sessionmaker[Session], store: ObjectStore, key: str) -> None:
    """Delete the object of a failed insert, unless a blob row names it after all (a commit
    whose answer was lost); when the database cannot tell, keep the object."""
    try:
        with session_scope(sessions) as session:
            known = session.execute(
                select(ActiveStorageBlob.id).where(ActiveStorageBlob.key == key)
            ).first()
    except Exception:
        log.warning("recording object %s kept: its blob row could not be checked", key)
        return
    if known is None:
        _delete_orphan(store, key)


def _insert_blob(session: Session, store: ObjectStore, blob: NewBlob) -> int:
    row = ActiveStorageBlob(
        key=blob.key,
        filename=blob.filename,
        content_type=blob.content_type,
        metadata_=json.dumps(
            {"identified": True, "analyzed": True, "duration": blob.duration_ms / 1000}
        ),
        service_name=store.service_name,
        byte_size=blob.byte_size,
        checksum=blob.checksum,
    )
    session.add(row)
    session.flush()
    return row.id
