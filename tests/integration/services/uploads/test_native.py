"""Native processing of direct uploads on real PostgreSQL and a real S3-protocol server."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import av
import pytest
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.errors import UploadProcessingFailed, UploadProcessingRetryable
from services.uploads.native import NATIVE_FLAG, handled_natively, process_upload
from services.uploads.object_store import S3ObjectStore
from services.uploads.recording import recording_key
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import (
    ActiveStorageAttachment,
    ActiveStorageBlob,
    CallDetail,
    Conversation,
    ConversationUpload,
)
from testkit.media import gsm_bytes, mp4_bytes
from tests.integration.services.uploads.conftest import (
    Uploads,
    bucket_keys,
    xcally_metadata,
    zipped,
)


def _upload(sessions: sessionmaker[Session], upload_id: int) -> ConversationUpload:
    with session_scope(sessions) as session:
        row = session.get(ConversationUpload, upload_id)
        assert row is not None
        session.expunge(row)
        return row


def _recordings(sessions: sessionmaker[Session], call_detail_id: int) -> list[tuple[Any, ...]]:
    with session_scope(sessions) as session:
        return [
            tuple(row)
            for row in session.execute(
                select(
                    ActiveStorageBlob.key, ActiveStorageBlob.filename, ActiveStorageBlob.byte_size
                )
                .join(
                    ActiveStorageAttachment, ActiveStorageAttachment.blob_id == ActiveStorageBlob.id
                )
                .where(
                    ActiveStorageAttachment.record_type == "CallDetail",
                    ActiveStorageAttachment.record_id == call_detail_id,
                    ActiveStorageAttachment.name == "recording",
                )
            )
        ]


def test_an_xcally_gsm_upload_is_completed_with_a_wav_recording(uploads: Uploads) -> None:
    # Given a failed-before upload (error metadata set) holding five seconds of GSM
    upload_id = uploads.upload(
        xcally_metadata("call-1"),
        data=gsm_bytes(seconds=5),
        status="processing",
        last_processing_error="old",
        last_processing_error_at=utcnow(),
        periodic_retry_count=2,
    )

    outcome = process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    # Then the upload completed, its error metadata cleared
    upload = _upload(uploads.sessions, upload_id)
    assert (upload.status, upload.periodic_retry_count, upload.last_processing_error) == (
        "completed",
        0,
        None,
    )
    assert upload.last_processing_error_at is None and upload.processed_at is not None
    assert upload.conversation_id == outcome.conversation_id
    # And the call detail holds the duration, the conversation the handling time
    with session_scope(uploads.sessions) as session:
        detail = session.get(CallDetail, outcome.call_detail_id)
        conversation = session.get(Conversation, outcome.conversation_id)
        assert detail is not None and conversation is not None
        assert (detail.duration_ms, conversation.handling_time) == (5000, 5)
        assert (conversation.external_id, conversation.external_type) == ("call-1", None)
    # And the recording is a WAV in the bucket under the call's key
    key = recording_key(upload_id, outcome.call_detail_id or 0)
    [(blob_key, filename, size)] = _recordings(uploads.sessions, outcome.call_detail_id or 0)
    assert (blob_key, filename) == (key, "call.wav")
    wav = uploads.objects.read(key)
    assert len(wav) == size
    with av.open(io.BytesIO(wav)) as container:
        assert container.streams.audio[0].codec_context.name == "pcm_s16le"


def test_an_outreach_kaia_mp4_in_a_zip_becomes_a_wav(uploads: Uploads) -> None:
    upload_id = uploads.upload(
        {"call_id": "kaia-1", "user": {"email": "x@example.com"}},
        source="outreach_kaia",
        filename="batch.zip",
        data=zipped("meeting.mp4", mp4_bytes(seconds=2)),
    )

    outcome = process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    assert outcome.status == "completed" and outcome.recording_created
    [(_, filename, _)] = _recordings(uploads.sessions, outcome.call_detail_id or 0)
    assert filename == "meeting.wav"


def test_a_wav_recording_shares_the_uploads_blob(uploads: Uploads) -> None:
    from services.uploads.media import prepare

    wav = prepare(gsm_bytes(seconds=1), "x.gsm").wav
    upload_id = uploads.upload(xcally_metadata("call-wav"), filename="call.wav", data=wav)

    outcome = process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    with session_scope(uploads.sessions) as session:
        blob_ids = (
            session.execute(
                select(ActiveStorageAttachment.blob_id).where(
                    or_(
                        (ActiveStorageAttachment.record_type == "ConversationUpload")
                        & (ActiveStorageAttachment.record_id == upload_id),
                        (ActiveStorageAttachment.record_type == "CallDetail")
                        & (ActiveStorageAttachment.record_id == outcome.call_detail_id),
                    )
                )
            )
            .scalars()
            .all()
        )
    assert len(blob_ids) == 2 and len(set(blob_ids)) == 1
    assert len(bucket_keys(uploads.objects)) == 1


@pytest.mark.parametrize(
    ("metadata", "filename", "data", "error_class"),
    [
        ({"agent": {"email": "a@b.c"}}, "call.gsm", None, "MetadataInvalid"),
        (xcally_metadata("c"), "call.mp4", b"not a video" * 40, "MediaInvalid"),
        (xcally_metadata("c"), "batch.zip", b"PK\x03\x04broken", "ArchiveInvalid"),
    ],
)
def test_validation_errors_are_terminal_and_fail_the_upload(
    uploads: Uploads, metadata: dict[str, Any], filename: str, data: bytes | None, error_class: str
) -> None:
    upload_id = uploads.upload(metadata, filename=filename, data=data)

    with pytest.raises(UploadProcessingFailed) as raised:
        process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    assert raised.value.error_class == error_class
    upload = _upload(uploads.sessions, upload_id)
    assert upload.status == "failed"
    assert (upload.last_processing_error or "").startswith(error_class)


def test_a_missing_stored_object_is_terminal(uploads: Uploads) -> None:
    upload_id = uploads.upload(xcally_metadata("c"), store_object=False)

    with pytest.raises(UploadProcessingFailed) as raised:
        process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    assert raised.value.error_class == "SourceFileMissing"
    assert _upload(uploads.sessions, upload_id).status == "failed"


def test_storage_down_is_retryable_and_the_retry_completes(uploads: Uploads) -> None:
    # Given object storage that does not answer (nothing listens on the port)
    upload_id = uploads.upload(xcally_metadata("call-down"))
    down = S3ObjectStore(
        _unreachable_client(), uploads.objects.bucket, uploads.objects.service_name
    )

    with pytest.raises(UploadProcessingRetryable) as raised:
        process_upload(uploads.sessions, down, uploads.org_id, upload_id)

    # Then the upload stays processing with the error recorded
    assert raised.value.error_class == "StorageUnavailable"
    upload = _upload(uploads.sessions, upload_id)
    assert upload.status == "processing"
    assert (upload.last_processing_error or "").startswith("StorageUnavailable")
    # And the worker's next attempt, storage back, completes it and clears the error
    process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)
    upload = _upload(uploads.sessions, upload_id)
    assert (upload.status, upload.last_processing_error) == ("completed", None)


def _unreachable_client() -> Any:
    """An S3 client of a port nobody listens on, failing fast (one attempt, 1 s)."""
    import socket

    import boto3
    from botocore.config import Config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )


def test_completed_and_other_uploads_are_left_alone(uploads: Uploads) -> None:
    done = uploads.upload(xcally_metadata("c1"), status="completed")
    expired = uploads.upload(xcally_metadata("c2"), status="expired")

    assert process_upload(uploads.sessions, uploads.objects, uploads.org_id, done).reason == (
        "already completed"
    )
    assert process_upload(uploads.sessions, uploads.objects, uploads.org_id, expired).status == (
        "skipped"
    )


def test_periodic_retry_eligibility(uploads: Uploads) -> None:
    now = utcnow()
    old = now - timedelta(hours=1)
    recent = uploads.upload(
        xcally_metadata("r1"), status="failed", last_processing_error_at=now - timedelta(minutes=5)
    )
    spent = uploads.upload(
        xcally_metadata("r2"),
        status="failed",
        last_processing_error_at=old,
        periodic_retry_count=3,
    )
    busy = uploads.upload(xcally_metadata("r3"), status="processing", processing_started_at=now)
    eligible = uploads.upload(
        xcally_metadata("r4"),
        status="failed",
        last_processing_error_at=old,
        periodic_retry_count=1,
    )
    stuck = uploads.upload(xcally_metadata("r5"), status="processing", processing_started_at=old)
    no_file = uploads.upload(
        xcally_metadata("r6"), status="failed", last_processing_error_at=old, store_object=False
    )

    def retry(upload_id: int) -> str:
        return process_upload(
            uploads.sessions, uploads.objects, uploads.org_id, upload_id, periodic=True
        ).status

    assert [retry(u) for u in (recent, spent, busy)] == ["skipped"] * 3
    assert [retry(u) for u in (eligible, stuck)] == ["completed"] * 2
    assert _upload(uploads.sessions, eligible).periodic_retry_count == 0  # cleared on success
    with pytest.raises(UploadProcessingFailed):
        retry(no_file)


def test_a_cross_tenant_upload_is_missing(uploads: Uploads) -> None:
    from shared.errors import RecordMissing

    upload_id = uploads.upload(xcally_metadata("c"))

    with pytest.raises(RecordMissing):
        process_upload(uploads.sessions, uploads.objects, uploads.org_id + 10_000, upload_id)


def test_the_flag_routes_only_native_sources_of_flagged_organizations() -> None:
    flagged = {7}

    def rollout(flag: str, organization_id: int) -> bool:
        return organization_id in flagged  # every flag on for organization 7

    assert NATIVE_FLAG == "api2_conversation_upload_native_processing"
    assert handled_natively(rollout, 7, "xcally") and handled_natively(rollout, 7, "outreach_kaia")
    assert not handled_natively(rollout, 7, "five9")
    assert not handled_natively(rollout, 8, "xcally")


def test_reprocessing_the_same_call_reuses_every_identity(uploads: Uploads) -> None:
    first = uploads.upload(xcally_metadata("same-call"))
    second = uploads.upload(xcally_metadata("same-call"))

    a = process_upload(uploads.sessions, uploads.objects, uploads.org_id, first)
    b = process_upload(uploads.sessions, uploads.objects, uploads.org_id, second)

    assert (a.conversation_id, a.call_detail_id) == (b.conversation_id, b.call_detail_id)
    assert a.recording_created and not b.recording_created
    assert len(_recordings(uploads.sessions, a.call_detail_id or 0)) == 1
    # the second pass's WAV (its own key) was deleted as an orphan
    assert recording_key(second, b.call_detail_id or 0) not in bucket_keys(uploads.objects)
    with session_scope(uploads.sessions) as session:
        count = session.execute(
            select(func.count())
            .select_from(Conversation)
            .where(Conversation.organization_id == uploads.org_id)
        ).scalar_one()
    assert count == 1
