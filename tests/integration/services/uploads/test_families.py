"""The 30-minute scan and the check/process families on real Redis, PostgreSQL and workers,
with Rails at the local Rails server: routing, job ids and dedupe, the Rails and native
paths, and the retry classification (terminal and exhausted attempts mark the upload failed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.uploads import cli as uploads_cli
from services.uploads import store
from services.uploads.families import PAUSE_FLAG, check_request, process_request
from services.uploads.object_store import S3ObjectStore
from services.uploads.ticks import TICK_NAME, last_due_slot, route
from shared.db.base import utcnow
from shared.db.models import (
    ActiveStorageAttachment,
    ActiveStorageBlob,
    ConversationUpload,
    Organization,
)
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads, xcally_metadata
from tests.platform_harness import wait_until
from tiers.policies import UPLOAD_RETRY, RetryPolicy

RAILS_TOKEN = "rails-tkn"
TWO_FAST = RetryPolicy(max_attempts=2, base_seconds=0.2)
PROCESS = "/internal/conversation_uploads/{}/process_direct"


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
    for name, value in {
        "SPEEDTIER_UPLOADS_STORAGE": "s3",
        "SPEEDTIER_UPLOADS_BUCKET": objects.bucket,
        "SPEEDTIER_UPLOADS_ENDPOINT_URL": s3_endpoint,
        "SPEEDTIER_UPLOADS_REGION": "us-east-1",
        "SPEEDTIER_UPLOADS_SERVICE_NAME": "amazon",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        rails_timeout_seconds=2.0,
        retries={"conversation_upload_process": TWO_FAST, "conversation_upload_check": TWO_FAST},
    )


def _state(platform: Platform, job_id: str) -> str | None:
    return (platform.broker.jobs.record(job_id) or {}).get("state")


def test_the_families_retry_five_times_with_the_polynomial_backoff() -> None:
    assert UPLOAD_RETRY.max_attempts == 5
    assert [UPLOAD_RETRY.backoff_seconds(n) for n in (1, 2, 3, 4)] == [3.0, 18.0, 83.0, 258.0]


def _row(session: Session, org: int, **fields: Any) -> int:
    with_file = fields.pop("file", True)
    upload = ConversationUpload(organization_id=org, **fields)
    session.add(upload)
    session.flush()
    if with_file:
        blob = ActiveStorageBlob(
            key=f"scan-{upload.id}", filename="f.gsm", service_name="amazon", byte_size=1
        )
        session.add(blob)
        session.flush()
        session.add(
            ActiveStorageAttachment(
                name="file", record_type="ConversationUpload", record_id=upload.id, blob_id=blob.id
            )
        )
        session.flush()
    return upload.id


def test_the_scan_routes_each_kind_of_upload(session: Session) -> None:
    session.execute(text("TRUNCATE conversation_uploads, active_storage_attachments CASCADE"))
    org = Organization(name="scan")
    session.add(org)
    session.flush()
    now = utcnow()
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    presign = _row(session, org.id, upload_type="presign", file=False, created_at=ago(60))
    direct = _row(session, org.id, upload_type="direct", created_at=ago(10))
    young = _row(session, org.id, upload_type="direct", created_at=ago(2))
    no_file = _row(session, org.id, upload_type="direct", file=False, created_at=ago(60))
    failed = _row(
        session, org.id, upload_type="direct", status="failed", last_processing_error_at=ago(45)
    )
    stuck = _row(
        session, org.id, upload_type="direct", status="processing", processing_started_at=ago(40)
    )
    # and uploads the scan must leave out
    _row(session, org.id, upload_type="direct", status="failed", periodic_retry_count=3)
    _row(session, org.id, upload_type="direct", status="failed", last_processing_error_at=ago(5))
    _row(session, org.id, upload_type="direct", status="processing", processing_started_at=ago(5))
    _row(session, org.id, upload_type="direct", created_at=now - timedelta(days=2))
    _row(session, org.id, upload_type="presign", status="failed", created_at=ago(60))
    _row(session, org.id, upload_type="direct", status="completed")

    requests, skipped = route(store.scan_candidates(session, now), now)

    routed = {
        (r.kind, r.params["conversation_upload_id"], r.params.get("periodic")) for r in requests
    }
    assert routed == {
        ("check_conversation_upload", presign, None),
        ("process_conversation_upload", direct, False),
        ("process_conversation_upload", failed, True),
        ("process_conversation_upload", stuck, True),
    }
    assert skipped == {"skippedDirect": 1, "graceDirect": 1}
    assert young not in {r.params["conversation_upload_id"] for r in requests}
    assert no_file not in {r.params["conversation_upload_id"] for r in requests}


def test_the_tick_enqueues_deterministic_jobs_and_dedupes(
    platform: Platform, uploads: Uploads
) -> None:
    old = utcnow() - timedelta(minutes=10)
    presign = uploads.upload({}, upload_type="presign", created_at=old)
    direct = uploads.upload(xcally_metadata("t1"), created_at=old)

    platform.tick("conversation-upload-checks").run("2026-12-01T10:30Z")
    again = platform.tick("conversation-upload-checks").run("2026-12-01T11:00Z")

    assert _state(platform, f"conversation-upload-check-{presign}") == "waiting"
    assert _state(platform, f"conversation-upload-process-{direct}") == "waiting"
    assert again["deduplicated"] >= 2


def test_the_rails_path_posts_process_direct_check_and_retry_direct(
    platform: Platform, uploads: Uploads, rails: RailsServer
) -> None:
    direct = uploads.upload({}, source="five9")
    failed = uploads.upload({}, source="five9", status="failed")
    presign = uploads.upload({}, upload_type="presign")
    org = uploads.org_id
    platform.router.enqueue(process_request(org, direct))
    platform.router.enqueue(process_request(org, failed, periodic=True))
    platform.router.enqueue(check_request(org, presign))

    with running_workers(platform):
        wait_until(
            lambda: (
                _state(platform, f"conversation-upload-process-{direct}") == "completed"
                and _state(platform, f"conversation-upload-process-{failed}") == "completed"
                and _state(platform, f"conversation-upload-check-{presign}") == "completed"
            )
        )

    assert [c.body for c in rails.calls(PROCESS.format(direct))] == [{"organization_id": org}]
    retry_path = f"/internal/conversation_uploads/{failed}/retry_direct"
    assert len(rails.calls(retry_path)) == 1
    assert len(rails.calls(f"/internal/conversation_uploads/{presign}/check")) == 1


def test_a_terminal_rails_error_marks_the_upload_failed_once(
    platform: Platform, uploads: Uploads, rails: RailsServer
) -> None:
    upload = uploads.upload({}, source="five9")
    rails.reject(PROCESS.format(upload), 422, "ConversationUploads::InvalidMetadata")
    platform.router.enqueue(process_request(uploads.org_id, upload))

    with running_workers(platform):
        wait_until(lambda: _state(platform, f"conversation-upload-process-{upload}") == "failed")

    assert len(rails.calls(PROCESS.format(upload))) == 1
    (mark,) = rails.calls(f"/internal/conversation_uploads/{upload}/mark_failed")
    assert mark.body["error_class"] == "ConversationUploads::InvalidMetadata"


def test_exhausted_retries_mark_the_upload_failed(
    platform: Platform, uploads: Uploads, rails: RailsServer
) -> None:
    upload = uploads.upload({}, source="five9")
    rails.fail(PROCESS.format(upload), "500", times=5)
    platform.router.enqueue(process_request(uploads.org_id, upload))

    with running_workers(platform):
        wait_until(lambda: _state(platform, f"conversation-upload-process-{upload}") == "failed")

    assert len(rails.calls(PROCESS.format(upload))) == TWO_FAST.max_attempts
    assert len(rails.calls(f"/internal/conversation_uploads/{upload}/mark_failed")) == 1


def test_the_native_flag_processes_xcally_without_rails(
    make_platform: MakePlatform, platform: Platform, uploads: Uploads, rails: RailsServer
) -> None:
    native = make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        flag_overrides={
            "api2_conversation_upload_native_processing": True,
            "api2_conversation_upload_sync_completion": True,
        },
    )
    upload = uploads.upload(xcally_metadata("native-1"))
    native.router.enqueue(process_request(uploads.org_id, upload))

    with running_workers(native):
        wait_until(
            lambda: _state(native, f"conversation-upload-process-{upload}") == "completed",
            timeout=30,
        )

    assert rails.calls(PROCESS.format(upload)) == []
    with native.sessions() as session:
        row = session.get(ConversationUpload, upload)
        assert row is not None and row.status == "completed"


def test_a_raised_pause_flag_skips_the_job(platform: Platform, uploads: Uploads) -> None:
    upload = uploads.upload({}, source="five9")
    platform.router.enqueue(process_request(uploads.org_id, upload))
    platform.flags.set(PAUSE_FLAG, True)
    try:
        with running_workers(platform):
            wait_until(
                lambda: _state(platform, f"conversation-upload-process-{upload}") == "skipped"
            )
    finally:
        platform.flags.set(PAUSE_FLAG, False)


def test_the_enqueue_route_hands_off_and_dedupes(client: FlaskClient, uploads: Uploads) -> None:
    body = {
        "requests": [
            {
                "kind": "process_conversation_upload",
                "organization_id": uploads.org_id,
                "conversation_upload_id": 41,
            }
        ]
    }
    route_path = "/internal/conversation_uploads/enqueue"

    first = client.post(route_path, json=body, headers=AUTH)
    second = client.post(route_path, json=body, headers=AUTH)

    assert first.status_code == second.status_code == 202
    assert first.get_json()["jobs"][0]["job_id"] == "conversation-upload-process-41"
    assert [first.get_json()["jobs"][0]["outcome"], second.get_json()["jobs"][0]["outcome"]] == [
        "added",
        "deduplicated",
    ]
    assert client.post(route_path, json=body).status_code == 401
    body["requests"][0]["conversation_upload_id"] = "x"
    assert client.post(route_path, json=body, headers=AUTH).status_code == 400


def test_readiness_prints_the_tick_job_id_and_reads_its_kept_summary(
    platform: Platform, uploads: Uploads
) -> None:
    # Given the scan's last due slot, not yet run
    tick = platform.tick(TICK_NAME)
    job_id = tick.job_id(tick.slot(last_due_slot(utcnow())))
    runner = CliRunner()
    before = runner.invoke(uploads_cli.uploads, ["readiness"], obj=lambda: platform)
    assert f"scan tick job: {job_id}" in before.output
    assert f"[fail] scan tick {job_id}: no record" in before.output
    # When that slot's tick runs on a worker
    platform.router.enqueue(
        JobRequest(tick.kind, None, {"slot": tick.slot(last_due_slot(utcnow()))})
    )
    with running_workers(platform):
        wait_until(lambda: _state(platform, job_id) == "completed")
    after = runner.invoke(uploads_cli.uploads, ["readiness"], obj=lambda: platform)
    # Then its record keeps the scan's and the reconciler's counts, and readiness reads them
    summary = json.loads((platform.brokers.record(job_id) or {})["data:summary"])
    assert "skippedDirect" in summary and "ledger_reconciled" in summary, summary
    assert f"[pass] scan tick {job_id}: completed" in after.output, after.output
