"""Native processing of XCALLY and Outreach Kaia direct uploads (``run.ts`` of the seed):
one pass of ``process_direct_upload`` / ``retry_direct_upload!`` without Rails.

A pass, in order, with where each step runs:

| step | transaction |
| --- | --- |
| claim the upload (pending/processing, or periodic-retry eligible) -> processing | short, commits |
| read the metadata; download the file; unpack a ZIP; decode, convert, measure | none |
| resolve identities; call detail duration, handling time; XCALLY: the ledger row | one, commits |
| write the WAV object (GSM/MP4) | none |
| attach the recording, ``FOR UPDATE`` on the call detail (:mod:`.recording`) | short |
| XCALLY: enqueue the completion job, the row accepted (:mod:`.handoff`) | short |
| processing -> completed, clearing the periodic-retry metadata | short, commits |

A terminal failure (:class:`~services.uploads.errors.UploadProcessingFailed`) marks the
upload failed and propagates (no retry); a retryable one records the error on the upload and
propagates so the worker retries inside its attempt budget. Organizations are routed here
only when :func:`handled_natively` says so (flag ``api2_conversation_upload_native_processing``;
for XCALLY also ``api2_conversation_upload_sync_completion``, since a natively processed
XCALLY upload hands its completion to API2 and only Rails' processor can take the legacy
GoodJob completion).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from sqlalchemy.orm import Session, sessionmaker

from services.uploads import store
from services.uploads.archive import recording_of
from services.uploads.call_metadata import NATIVE_SOURCES, call_record
from services.uploads.errors import UploadProcessingFailed, source_file_missing
from services.uploads.handoff import HANDED_OFF_SOURCE, CompletionHandOff
from services.uploads.identities import resolve
from services.uploads.media import prepare
from services.uploads.object_store import ObjectStore
from services.uploads.recording import NewBlob, attach_recording, recording_key
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import CallDetail, Conversation, ConversationUpload
from shared.errors import RecordMissing
from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION
from tiers.faults import fault_point

log = logging.getLogger(__name__)

NATIVE_FLAG = "api2_conversation_upload_native_processing"


def handled_natively(
    rollout: Callable[[str, int], bool], organization_id: int, source: str | None
) -> bool:
    """Whether this organization's upload of ``source`` is processed here, not by Rails
    (``rollout(flag, organization_id)`` reads a rollout flag). An XCALLY upload also needs
    the completion flag: with it off, Rails' processor keeps the legacy batch completion."""
    if source not in NATIVE_SOURCES or not rollout(NATIVE_FLAG, organization_id):
        return False
    return source != HANDED_OFF_SOURCE or rollout(
        CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id
    )


@dataclass(frozen=True)
class Outcome:
    """How a pass ended: ``completed``, or ``skipped`` with the reason."""

    status: str
    reason: str = ""
    conversation_id: int | None = None
    call_detail_id: int | None = None
    recording_created: bool = False


def process_upload(
    sessions: sessionmaker[Session],
    objects: ObjectStore,
    organization_id: int,
    upload_id: int,
    *,
    periodic: bool = False,
    hand_off: CompletionHandOff | None = None,
    now: Callable[[], datetime] = utcnow,
) -> Outcome:
    """One native pass over the upload (``periodic``: the periodic-retry path; ``hand_off``:
    the XCALLY completion hand-off, none for other sources).

    Raises:
      RecordMissing: the upload is missing or another organization's.
      UploadProcessingFailed: terminal; the upload was marked failed.
      UploadProcessingRetryable: transient; the error was recorded on the upload.
    """
    with session_scope(sessions) as session:
        claimed = store.claim(session, organization_id, upload_id, now(), periodic=periodic)
        if claimed == "missing":
            raise RecordMissing(f"conversation upload {upload_id}")
        if claimed == "file missing":
            failure = source_file_missing(f"upload {upload_id} has no stored file")
            store.mark_failed(session, organization_id, upload_id, str(failure), now())
            session.commit()
            raise failure
        if isinstance(claimed, str):
            return Outcome("skipped", claimed)
        session.commit()
    try:
        return _run(sessions, objects, organization_id, claimed, hand_off, now)
    except UploadProcessingFailed as exc:
        _record(sessions, store.mark_failed, organization_id, upload_id, str(exc), now())
        raise
    except Exception as exc:
        _record(sessions, store.record_retry, organization_id, upload_id, str(exc), now())
        raise


def _record(
    sessions: sessionmaker[Session],
    write: Callable[[Session, int, int, str, datetime], bool],
    organization_id: int,
    upload_id: int,
    error: str,
    moment: datetime,
) -> None:
    try:
        with session_scope(sessions) as session:
            write(session, organization_id, upload_id, error[:2000], moment)
            session.commit()
    except Exception:
        log.warning("upload %s: could not record %r", upload_id, error, exc_info=True)


def _run(
    sessions: sessionmaker[Session],
    objects: ObjectStore,
    organization_id: int,
    claimed: store.Claimed,
    hand_off: CompletionHandOff | None,
    now: Callable[[], datetime],
) -> Outcome:
    call = call_record(claimed.source, claimed.metadata)
    data = objects.read(claimed.file.key)
    recording, filename = recording_of(data, claimed.file.filename)
    media = prepare(recording, filename)
    if media.wav is None and filename != claimed.file.filename:
        # A recording unpacked from a ZIP has no blob of its own to share: keep its bytes.
        media = type(media)(wav=recording, duration_ms=media.duration_ms)
        stored_name = filename
    else:
        stored_name = str(PurePosixPath(filename).with_suffix(".wav"))
    with session_scope(sessions) as session:
        upload = session.get(ConversationUpload, claimed.upload_id)
        if upload is None or upload.organization_id != organization_id:
            raise RecordMissing(f"conversation upload {claimed.upload_id}")
        ids = resolve(session, organization_id, upload, call)
        detail = session.get(CallDetail, ids.call_detail_id)
        conversation = session.get(Conversation, ids.conversation_id)
        assert detail is not None and conversation is not None
        detail.duration_ms = media.duration_ms
        conversation.handling_time = round(media.duration_ms / 1000)
        if hand_off is not None:
            hand_off.record(session, organization_id, upload.id, ids.conversation_id, now())
        session.commit()
    blob: NewBlob | int = claimed.file.blob_id
    if media.wav is not None:
        key = recording_key(claimed.upload_id, ids.call_detail_id)
        content_type = "audio/x-wav" if stored_name.endswith(".wav") else "application/octet-stream"
        objects.write(key, media.wav, content_type)
        fault_point("wav.after")
        blob = NewBlob.of(key, stored_name, media.wav, media.duration_ms, content_type)
    attached = attach_recording(sessions, objects, organization_id, ids.call_detail_id, blob)
    if hand_off is not None:
        hand_off.dispatch(sessions, organization_id, claimed.upload_id, ids.conversation_id)
    with session_scope(sessions) as session:
        store.complete(session, organization_id, claimed.upload_id, ids.conversation_id, now())
        session.commit()
    return Outcome(
        "completed",
        conversation_id=ids.conversation_id,
        call_detail_id=ids.call_detail_id,
        recording_created=attached.created,
    )
