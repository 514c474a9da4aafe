"""The native XCALLY completion hand-off (ENG-3242) on real Redis, PostgreSQL, S3 (moto's
server) and workers: the ``sync_completion`` row written in the persistence transaction
(reopened when failed), the pinned completion job enqueued after the recording attachment,
the row accepted then completed; an enqueue failure marks the row uncertain and fails the
pass retryably; the reconciler takes the rows a pass left behind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from services.rails import delivery_claims
from services.uploads.errors import UploadProcessingRetryable
from services.uploads.families import completion_job_id, process_request
from services.uploads.handoff import CompletionHandOff, dispatch_key
from services.uploads.native import handled_natively, process_upload
from services.uploads.object_store import S3ObjectStore
from services.uploads.reconciler import reconcile
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import ConversationUpload, ConversationUploadDelivery
from shared.rollouts import (
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING,
    CONVERSATION_UPLOAD_SYNC_COMPLETION,
)
from testkit.fakes.rails_server import RailsServer
from testkit.media import mp4_bytes
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.test_route import RedisServer
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import (
    Uploads,
    bucket_keys,
    s3_settings,
    xcally_metadata,
    zipped,
)
from tests.platform_harness import wait_until

RAILS_TOKEN = "rails-tkn"
ALL_ON = {
    CONVERSATION_UPLOAD_NATIVE_PROCESSING: True,
    CONVERSATION_UPLOAD_SYNC_COMPLETION: True,
    CONVERSATION_UPLOAD_DURABLE_DELIVERY: True,
}


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(
    make_platform: MakePlatform,
    rails: RailsServer,
    objects: S3ObjectStore,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Platform:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        flag_overrides=ALL_ON,
        **s3_settings(objects, s3_endpoint),
    )


def _row(sessions: sessionmaker[Session], upload_id: int) -> ConversationUploadDelivery | None:
    with session_scope(sessions) as session:
        row = session.execute(
            select(ConversationUploadDelivery).where(
                ConversationUploadDelivery.conversation_upload_id == upload_id,
                ConversationUploadDelivery.kind == "sync_completion",
            )
        ).scalar()
        if row is not None:
            session.expunge(row)
        return row


def _row_state(sessions: sessionmaker[Session], upload_id: int) -> str | None:
    row = _row(sessions, upload_id)
    return None if row is None else row.state


def _state(platform: Platform, job_id: str) -> str | None:
    return (platform.broker.jobs.record(job_id) or {}).get("state")


def _upload(sessions: sessionmaker[Session], upload_id: int) -> ConversationUpload:
    with session_scope(sessions) as session:
        row = session.get(ConversationUpload, upload_id)
        assert row is not None
        session.expunge(row)
        return row


def _complete_path(conversation_id: int | None) -> str:
    return f"/internal/conversations/{conversation_id}/complete_conversation_sync"


def test_a_native_xcally_upload_hands_its_completion_off_once(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    # Given an XCALLY and an Outreach Kaia upload, every flag on
    org, sessions = uploads.org_id, uploads.sessions
    xcally = uploads.upload(xcally_metadata("handoff-1"))
    kaia = uploads.upload(
        {"call_id": "kaia-handoff", "user": {"email": "x@example.com"}},
        source="outreach_kaia",
        filename="batch.zip",
        data=zipped("meeting.mp4", mp4_bytes(seconds=1)),
    )
    for upload in (xcally, kaia):
        platform.router.enqueue(process_request(org, upload))

    # When the workers process them
    with running_workers(platform):
        wait_until(lambda: _row_state(sessions, xcally) == "completed", timeout=60)
        wait_until(lambda: _state(platform, f"conversation-upload-process-{kaia}") == "completed")

    # Then the XCALLY upload's completion went through API2's pinned job, once, without Rails'
    # processors; the row carries the pinned run id and the conversation
    done = _upload(sessions, xcally)
    row = _row(sessions, xcally)
    assert done.status == "completed" and row is not None
    assert (row.sync_run_id, row.conversation_id, row.owner) == (
        f"xcally-upload-{xcally}",
        done.conversation_id,
        "api2",
    )
    assert row.accepted_at is not None and row.completed_at is not None
    assert row.delivery_key == f"conversation-upload/sync-completion/{xcally}"
    assert _state(platform, completion_job_id(xcally)) == "completed"
    calls = rails.calls(_complete_path(done.conversation_id))
    assert [call.body for call in calls] == [
        {"organization_id": org, "conversation_upload_id": xcally, "sync_run_id": row.sync_run_id}
    ]
    assert rails.calls(f"/internal/conversation_uploads/{xcally}/process_direct") == []
    # Outreach Kaia has no completion hand-off (only Xcally#process makes one)
    assert _row(sessions, kaia) is None
    assert _state(platform, completion_job_id(kaia)) is None


def test_a_retried_pass_collapses_onto_the_handed_off_job(
    platform: Platform, uploads: Uploads
) -> None:
    # Given a pass that handed its completion off and then failed before completing the
    # upload (it stays processing, as when its last write is lost)
    org, sessions = uploads.org_id, uploads.sessions
    upload = uploads.upload(xcally_metadata("handoff-twice"))
    hand_off = CompletionHandOff(platform.router, durable=True)
    first = process_upload(sessions, uploads.objects, org, upload, hand_off=hand_off)
    job_id = completion_job_id(upload)
    first_message = (platform.broker.jobs.record(job_id) or {})["msg"]
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUpload)
            .where(ConversationUpload.id == upload)
            .values(status="processing")
        )
        session.commit()

    # When the retry runs the whole pass again
    again = process_upload(sessions, uploads.objects, org, upload, hand_off=hand_off)

    # Then its hand-off collapsed onto the queued job: one job, one recording, one row
    assert again.status == "completed" and not again.recording_created
    assert again.conversation_id == first.conversation_id
    assert (platform.broker.jobs.record(job_id) or {})["msg"] == first_message
    assert _state(platform, job_id) == "waiting"
    row = _row(sessions, upload)
    assert row is not None and (row.state, row.replay_count) == ("accepted", 0)


def test_without_the_durable_ledger_the_job_is_handed_off_and_no_row_written(
    platform: Platform, uploads: Uploads
) -> None:
    upload = uploads.upload(xcally_metadata("handoff-no-ledger"))

    process_upload(
        uploads.sessions,
        uploads.objects,
        uploads.org_id,
        upload,
        hand_off=CompletionHandOff(platform.router, durable=False),
    )

    assert _state(platform, completion_job_id(upload)) == "waiting"
    assert _row(uploads.sessions, upload) is None


def test_an_enqueue_failure_marks_the_row_uncertain_and_retries_the_pass(
    tmp_path: Path, make_platform: MakePlatform, platform: Platform, uploads: Uploads
) -> None:
    # Given a hand-off whose Redis dies after start-up
    org, sessions = uploads.org_id, uploads.sessions
    server = RedisServer(tmp_path)
    try:
        dead = make_platform(redis_url=server.url)
        server.kill()
        upload = uploads.upload(xcally_metadata("handoff-redis-down"))

        # When the pass reaches the enqueue
        with pytest.raises(UploadProcessingRetryable) as raised:
            process_upload(
                sessions,
                uploads.objects,
                org,
                upload,
                hand_off=CompletionHandOff(dead.router, durable=True),
            )
    finally:
        server.kill()

    # Then the pass failed retryably (the process job retries), after the recording was
    # attached, and the row (committed with the persistence transaction) is uncertain
    assert raised.value.error_class == "EnqueueFailed"
    failed_pass = _upload(sessions, upload)
    assert failed_pass.status == "processing"
    assert (failed_pass.last_processing_error or "").startswith("EnqueueFailed")
    row = _row(sessions, upload)
    assert row is not None and row.state == "uncertain"
    assert "enqueue failed" in (row.last_error or "")
    assert delivery_claims.find(sessions, dispatch_key(upload)) is None  # released: resendable
    sources_and_wav = bucket_keys(uploads.objects)

    # When the retry runs with Redis answering again (this test's own Redis)
    outcome = process_upload(
        sessions,
        uploads.objects,
        org,
        upload,
        hand_off=CompletionHandOff(platform.router, durable=True),
    )

    # Then the same recording is kept, the job is queued and the row accepted
    assert outcome.status == "completed" and not outcome.recording_created
    assert bucket_keys(uploads.objects) == sources_and_wav
    assert _state(platform, completion_job_id(upload)) == "waiting"
    row = _row(sessions, upload)
    assert row is not None and row.state == "accepted" and row.owner == "api2"
    claim = delivery_claims.find(sessions, dispatch_key(upload))
    assert claim is not None and claim.resolved


def _age(sessions: sessionmaker[Session], upload_id: int) -> None:
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.conversation_upload_id == upload_id)
            .values(updated_at=utcnow() - timedelta(minutes=11))
        )
        session.commit()


def _job_state(platform: Platform) -> Any:
    return lambda job_id: _state(platform, job_id)


def test_the_reconciler_takes_the_rows_a_pass_left_behind(
    platform: Platform, uploads: Uploads
) -> None:
    org, sessions = uploads.org_id, uploads.sessions
    # Given a pass that committed its row and died before its enqueue (the row pending, API2's)
    stranded = uploads.upload(xcally_metadata("handoff-stranded"))
    outcome = process_upload(
        sessions,
        uploads.objects,
        org,
        stranded,
        hand_off=CompletionHandOff(platform.router, durable=True),
    )
    platform.broker.jobs.client.delete(platform.broker.jobs.record_key(completion_job_id(stranded)))
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.conversation_upload_id == stranded)
            .values(state="pending", accepted_at=None)
        )
        session.commit()
    _age(sessions, stranded)

    # When the tick's reconciler runs
    counts = reconcile(sessions, platform.router, _job_state(platform), utcnow())

    # Then it replays the row: the job is back and the row accepted with one replay
    assert counts.get("replay") == 1
    row = _row(sessions, stranded)
    assert row is not None and (row.state, row.replay_count) == ("accepted", 1)
    assert row.conversation_id == outcome.conversation_id
    assert _state(platform, completion_job_id(stranded)) == "waiting"


def test_a_failed_row_is_reopened_by_the_periodic_retry(
    platform: Platform, uploads: Uploads
) -> None:
    # Given a pass whose enqueue kept failing until its attempts ran out: the upload failed,
    # and the reconciler failed the uncertain row
    org, sessions = uploads.org_id, uploads.sessions
    upload = uploads.upload(xcally_metadata("handoff-reopen"))
    process_upload(
        sessions,
        uploads.objects,
        org,
        upload,
        hand_off=CompletionHandOff(platform.router, durable=True),
    )
    platform.broker.jobs.client.delete(platform.broker.jobs.record_key(completion_job_id(upload)))
    long_ago = utcnow() - timedelta(hours=1)
    with session_scope(sessions) as session:
        # a refused enqueue releases the dispatch claim: none is left behind
        session.execute(
            text("DELETE FROM outbound_delivery_claims WHERE delivery_key = :key"),
            {"key": dispatch_key(upload)},
        )
        session.execute(
            update(ConversationUpload)
            .where(ConversationUpload.id == upload)
            .values(
                status="failed",
                last_processing_error="EnqueueFailed: Redis down",
                last_processing_error_at=long_ago,
            )
        )
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.conversation_upload_id == upload)
            .values(state="uncertain")
        )
        session.commit()
    _age(sessions, upload)
    assert reconcile(sessions, platform.router, _job_state(platform), utcnow()).get("failed") == 1
    failed = _row(sessions, upload)
    assert failed is not None and failed.state == "failed"
    assert failed.last_error == "the upload is failed"

    # When the periodic retry reprocesses the upload
    outcome = process_upload(
        sessions,
        uploads.objects,
        org,
        upload,
        periodic=True,
        hand_off=CompletionHandOff(platform.router, durable=True),
    )

    # Then the row was reopened in the persistence transaction and handed off again
    assert outcome.status == "completed"
    row = _row(sessions, upload)
    assert row is not None
    assert (row.state, row.replay_count, row.failed_at, row.last_error) == (
        "accepted",
        0,
        None,
        None,
    )
    assert _state(platform, completion_job_id(upload)) == "waiting"


def test_xcally_needs_the_completion_flag_to_be_processed_natively() -> None:
    on = {CONVERSATION_UPLOAD_NATIVE_PROCESSING}

    def rollout(flag: str, _organization_id: int) -> bool:
        return flag in on

    # without the completion flag XCALLY stays with Rails (its legacy batch completion)
    assert not handled_natively(rollout, 7, "xcally")
    assert handled_natively(rollout, 7, "outreach_kaia")
    on.add(CONVERSATION_UPLOAD_SYNC_COMPLETION)
    assert handled_natively(rollout, 7, "xcally")
