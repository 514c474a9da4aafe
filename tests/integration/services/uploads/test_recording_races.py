"""The recording attachment under faults: a second processor racing the insert, a process
killed between the WAV upload and the attachment insert, and a worker process of the
platform SIGKILLed at that point (fault point ``wav.after``) whose job another worker
finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.families import completion_job_id, process_request
from services.uploads.native import process_upload
from services.uploads.object_store import S3ObjectStore
from services.uploads.recording import NewBlob, attach_recording, recording_key
from shared.db.engine import session_scope
from shared.db.models import (
    ActiveStorageAttachment,
    ActiveStorageBlob,
    CallDetail,
    Conversation,
    ConversationPart,
    ConversationUpload,
    ConversationUploadDelivery,
)
from shared.rollouts import (
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING,
    CONVERSATION_UPLOAD_SYNC_COMPLETION,
)
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import start_platform_worker
from tests.integration.services.uploads.conftest import (
    Uploads,
    bucket_keys,
    s3_settings,
    xcally_metadata,
)
from tests.platform_harness import wait_until

ROOT = Path(__file__).resolve().parents[4]


def _attachments(sessions: sessionmaker[Session], call_detail_id: int) -> list[str]:
    with session_scope(sessions) as session:
        return list(
            session.execute(
                select(ActiveStorageBlob.key)
                .join(
                    ActiveStorageAttachment, ActiveStorageAttachment.blob_id == ActiveStorageBlob.id
                )
                .where(
                    ActiveStorageAttachment.record_type == "CallDetail",
                    ActiveStorageAttachment.record_id == call_detail_id,
                    ActiveStorageAttachment.name == "recording",
                )
            ).scalars()
        )


def _wait_until_blocked(sessions: sessionmaker[Session], deadline: float = 20.0) -> None:
    """Until some backend of this database waits on a row lock (the second processor)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with session_scope(sessions) as session:
            if session.execute(query).scalar_one():
                return
        time.sleep(0.05)
    raise AssertionError("the second processor never waited on the call-detail lock")


def test_a_second_processor_waits_on_the_lock_and_attaches_nothing(uploads: Uploads) -> None:
    # Given a processed call and a second upload's WAV already written to storage
    first = uploads.upload(xcally_metadata("race"))
    second = uploads.upload(xcally_metadata("race"))
    done = process_upload(uploads.sessions, uploads.objects, uploads.org_id, first)
    detail_id = done.call_detail_id or 0
    first_key = recording_key(first, detail_id)
    with session_scope(uploads.sessions) as session:  # back to "no recording yet"
        session.execute(
            delete(ActiveStorageAttachment).where(
                ActiveStorageAttachment.record_type == "CallDetail",
                ActiveStorageAttachment.record_id == detail_id,
            )
        )
        session.execute(delete(ActiveStorageBlob).where(ActiveStorageBlob.key == first_key))
        session.commit()
    late_key = recording_key(second, detail_id)
    uploads.objects.write(late_key, b"RIFF-late", "audio/x-wav")

    # When processor A holds the call-detail row lock while B tries to attach
    holder = uploads.sessions()
    holder.execute(select(CallDetail.id).where(CallDetail.id == detail_id).with_for_update())
    results: list[object] = []
    racer = threading.Thread(
        target=lambda: results.append(
            attach_recording(
                uploads.sessions,
                uploads.objects,
                uploads.org_id,
                detail_id,
                NewBlob.of(late_key, "late.wav", b"RIFF-late", 1000, "audio/x-wav"),
            )
        )
    )
    racer.start()
    _wait_until_blocked(uploads.sessions)
    # and A inserts its recording and commits
    blob = ActiveStorageBlob(key=first_key, filename="call.wav", service_name="amazon", byte_size=1)
    holder.add(blob)
    holder.flush()
    holder.add(
        ActiveStorageAttachment(
            name="recording", record_type="CallDetail", record_id=detail_id, blob_id=blob.id
        )
    )
    holder.commit()
    holder.close()
    racer.join(timeout=30)

    # Then B re-checked under the lock: one recording, A's, and B's object deleted
    assert [getattr(result, "created", None) for result in results] == [False]
    assert _attachments(uploads.sessions, detail_id) == [first_key]
    assert late_key not in bucket_keys(uploads.objects)
    assert first_key in bucket_keys(uploads.objects)


def test_concurrent_processors_of_one_call_leave_one_recording(uploads: Uploads) -> None:
    upload_ids = [uploads.upload(xcally_metadata("together")) for _ in range(4)]
    barrier = threading.Barrier(len(upload_ids))
    outcomes: list[object] = []
    errors: list[BaseException] = []

    def run(upload_id: int) -> None:
        barrier.wait()
        try:
            outcomes.append(
                process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(u,)) for u in upload_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    details = {getattr(o, "call_detail_id", None) for o in outcomes}
    assert len(details) == 1
    [detail_id] = details
    assert len(_attachments(uploads.sessions, detail_id or 0)) == 1
    assert sum(bool(getattr(o, "recording_created", False)) for o in outcomes) == 1
    with session_scope(uploads.sessions) as session:
        conversations = session.execute(
            select(Conversation.id).where(Conversation.organization_id == uploads.org_id)
        ).all()
    assert len(conversations) == 1
    # every losing pass deleted its own WAV: the sources plus one recording remain
    assert len(bucket_keys(uploads.objects)) == len(upload_ids) + 1


_KILLED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import boto3
    from services.uploads import native
    from services.uploads.object_store import S3ObjectStore
    from shared.db.engine import make_engine, make_session_factory

    url, endpoint, bucket, org_id, upload_id = sys.argv[1:6]
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )
    objects = S3ObjectStore(client, bucket, "amazon")

    def killed(*args, **kwargs):
        # the WAV is in storage; die before the attachment insert
        os.kill(os.getpid(), signal.SIGKILL)

    native.attach_recording = killed
    native.process_upload(
        make_session_factory(make_engine(url)), objects, int(org_id), int(upload_id)
    )
    """
)


def test_a_process_killed_between_wav_upload_and_insert_leaves_no_orphan(
    uploads: Uploads, database_url: str, s3_endpoint: str
) -> None:
    upload_id = uploads.upload(xcally_metadata("killed"))
    source_keys = bucket_keys(uploads.objects)

    # When a processor is SIGKILLed right after writing the WAV
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _KILLED_CHILD,
            database_url,
            s3_endpoint,
            uploads.objects.bucket,
            str(uploads.org_id),
            str(upload_id),
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    written = bucket_keys(uploads.objects) - source_keys
    assert len(written) == 1  # the WAV landed, unattached

    # And the job's retry runs the pass again
    outcome = process_upload(uploads.sessions, uploads.objects, uploads.org_id, upload_id)

    # Then there is one recording, on the object the killed pass wrote, and no orphan
    assert outcome.status == "completed" and outcome.recording_created
    assert _attachments(uploads.sessions, outcome.call_detail_id or 0) == sorted(written)
    assert bucket_keys(uploads.objects) == source_keys | written


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token="rails-tkn")
    with server:
        yield server


def _sync_completion_state(sessions: sessionmaker[Session], upload_id: int) -> str | None:
    with session_scope(sessions) as session:
        return session.execute(
            select(ConversationUploadDelivery.state).where(
                ConversationUploadDelivery.conversation_upload_id == upload_id,
                ConversationUploadDelivery.kind == "sync_completion",
            )
        ).scalar()


def test_a_worker_killed_between_wav_upload_and_insert_is_finished_by_another(
    uploads: Uploads,
    objects: S3ObjectStore,
    s3_endpoint: str,
    rails: RailsServer,
    make_platform: MakePlatform,
    redis_url: str,
    database_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the production workers' settings (native processing, XCALLY completion, the
    # durable ledger, S3 at the moto server) and a queued process job
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = {
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": namespace,
        "environment": "test",
        "rails_internal_url": rails.base_url,
        "rails_internal_token": "rails-tkn",
        "heartbeat_timeout_seconds": 2.0,
        "group_lease_seconds": 2.0,
        "flag_overrides": {
            CONVERSATION_UPLOAD_NATIVE_PROCESSING: True,
            CONVERSATION_UPLOAD_SYNC_COMPLETION: True,
            CONVERSATION_UPLOAD_DURABLE_DELIVERY: True,
        },
        **s3_settings(objects, s3_endpoint),
    }
    platform = make_platform(**{k: v for k, v in settings.items() if k != "environment"})
    sessions, org = uploads.sessions, uploads.org_id
    upload = uploads.upload(xcally_metadata("killed-worker"))
    sources = bucket_keys(objects)
    process_job = f"conversation-upload-process-{upload}"
    platform.router.enqueue(process_request(org, upload))

    # When a worker process is SIGKILLed right after writing the WAV
    doomed = start_platform_worker(settings, fault="wav.after")
    doomed.join(timeout=120)
    assert doomed.exitcode == -signal.SIGKILL
    written = bucket_keys(objects) - sources
    assert len(written) == 1  # the WAV landed, unattached
    with session_scope(sessions) as session:
        upload_row = session.get(ConversationUpload, upload)
        assert upload_row is not None and upload_row.status == "processing"
    # the hand-off's row was committed with the persistence transaction, and its job is
    # enqueued only after the attachment: not yet
    assert _sync_completion_state(sessions, upload) == "pending"
    assert platform.broker.jobs.record(completion_job_id(upload)) is None

    # And another worker takes the redelivered job over
    survivor = start_platform_worker(settings)
    try:
        wait_until(
            lambda: (platform.broker.jobs.record(process_job) or {}).get("state") == "completed",
            timeout=120,
        )
        wait_until(lambda: _sync_completion_state(sessions, upload) == "completed", timeout=60)
    finally:
        if survivor.pid is not None:
            os.kill(survivor.pid, signal.SIGTERM)
        survivor.join(timeout=30)

    # Then the upload completed with exactly one recording, on the object the killed worker
    # wrote (overwritten under the same key), no orphan in the bucket, one completion
    with session_scope(sessions) as session:
        done = session.get(ConversationUpload, upload)
        assert done is not None and done.status == "completed"
        conversation_id = done.conversation_id
        detail_id = session.execute(
            select(CallDetail.id)
            .join(ConversationPart, ConversationPart.id == CallDetail.conversation_part_id)
            .where(ConversationPart.conversation_id == conversation_id)
        ).scalar_one()
    assert _attachments(sessions, detail_id) == sorted(written)
    assert bucket_keys(objects) == sources | written
    complete = f"/internal/conversations/{conversation_id}/complete_conversation_sync"
    assert len(rails.calls(complete)) == 1
