"""The recording attachment under faults: a second processor racing the insert, and a
process killed between the WAV upload and the attachment insert."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.native import process_upload
from services.uploads.recording import NewBlob, attach_recording, recording_key
from shared.db.engine import session_scope
from shared.db.models import ActiveStorageAttachment, ActiveStorageBlob, CallDetail, Conversation
from tests.integration.services.uploads.conftest import Uploads, bucket_keys, xcally_metadata

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
