"""End to end on real workers: uploads across organizations handed off through the route
(native processing, XCALLY completion and the durable ledger on; each processed upload hands
its completion off natively), with injected faults, until every upload and every ledger row is
terminal. ``UPLOADS_E2E_N`` scales it (default 200; ``python -m bench.uploads`` runs 2,000).

Faults: 5% of hand-offs never reach API2 (Rails' POST failed in transport: the row is left
``uncertain`` and no job exists, so only the reconciler can repair it), 1% of responses are
lost after the job was accepted (Rails writes ``uncertain``, which must not undo
``accepted``), 5% of recordings are corrupt (terminal, failed with the reason). Rows are aged
past the 10-minute grace between reconciler rounds instead of waiting ten minutes.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from services.uploads.families import completion_job_id
from services.uploads.object_store import S3ObjectStore
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import (
    ActiveStorageAttachment,
    ConversationUpload,
    ConversationUploadDelivery,
)
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads, bucket_keys, xcally_metadata
from tests.platform_harness import wait_until

N = int(os.environ.get("UPLOADS_E2E_N", "200"))
ORGS = 20
ROUTE = "/internal/conversation_uploads/enqueue"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token="t")
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
        rails_internal_token="t",
        flag_overrides={
            "api2_conversation_upload_native_processing": True,
            "api2_conversation_upload_sync_completion": True,
            "api2_conversation_upload_durable_delivery": True,
        },
    )


def _rails_marks(sessions: sessionmaker[Session], upload_id: int, state: str) -> None:
    """What Rails writes after its POST: only a row still pending moves."""
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(
                ConversationUploadDelivery.conversation_upload_id == upload_id,
                ConversationUploadDelivery.state == "pending",
            )
            .values(state=state, last_attempted_at=utcnow())
        )
        session.commit()


def _open_rows(sessions: sessionmaker[Session], ids: list[int]) -> int:
    with session_scope(sessions) as session:
        return int(
            session.execute(
                select(func.count()).where(
                    ConversationUploadDelivery.conversation_upload_id.in_(ids),
                    ConversationUploadDelivery.state.not_in(("completed", "failed")),
                )
            ).scalar_one()
        )


def _live_jobs(platform: Platform, ids: list[int]) -> int:
    live = ("waiting", "parked", "delayed", "active")
    job_ids = [f"conversation-upload-process-{i}" for i in ids]
    job_ids += [completion_job_id(i) for i in ids]
    return sum((platform.broker.jobs.record(j) or {}).get("state") in live for j in job_ids)


def test_uploads_end_terminal_with_one_recording_each(
    app: Flask, platform: Platform, uploads: Uploads
) -> None:
    rnd = random.Random(12)
    sessions = uploads.sessions
    orgs = [uploads.organization() for _ in range(ORGS)]
    created: dict[int, tuple[int, str]] = {}
    for index in range(N):
        uploads.org_id = orgs[index % ORGS]
        fate = rnd.random()
        kind = (
            "corrupt" if fate < 0.05 else "lost" if fate < 0.10 else "late" if fate < 0.11 else "ok"
        )
        data = b"junk" * 64 if kind == "corrupt" else None
        filename = "call.mp4" if kind == "corrupt" else "call.gsm"
        upload_id = uploads.upload(xcally_metadata(f"e2e-{index}"), filename=filename, data=data)
        with session_scope(sessions) as session:
            session.add(
                ConversationUploadDelivery(
                    organization_id=uploads.org_id,
                    conversation_upload_id=upload_id,
                    kind="process",
                    delivery_key=f"conversation-upload/process/{upload_id}",
                )
            )
            session.commit()
        created[upload_id] = (uploads.org_id, kind)
    ids = list(created)
    client = app.test_client()
    handed: dict[int, object] = {}
    started = time.monotonic()

    with running_workers(platform, threads=4):
        for upload_id, (org, kind) in created.items():
            handed[upload_id] = utcnow()
            if kind == "lost":
                _rails_marks(sessions, upload_id, "uncertain")  # the POST never arrived
                continue
            body = {
                "requests": [
                    {
                        "kind": "process_conversation_upload",
                        "organization_id": org,
                        "conversation_upload_id": upload_id,
                    }
                ]
            }
            assert client.post(ROUTE, json=body, headers=AUTH).status_code == 202
            _rails_marks(sessions, upload_id, "uncertain" if kind == "late" else "sent")
        rounds = 0
        replays = 0
        while _open_rows(sessions, ids) and rounds < 8:
            wait_until(lambda: _live_jobs(platform, ids) == 0, timeout=600, interval=0.2)
            with session_scope(sessions) as session:  # ten minutes pass
                session.execute(
                    update(ConversationUploadDelivery)
                    .where(ConversationUploadDelivery.conversation_upload_id.in_(ids))
                    .values(updated_at=ConversationUploadDelivery.updated_at - text_interval())
                )
                session.commit()
            summary = platform.tick("conversation-upload-checks").run(f"e2e-{rounds}")
            replays += summary.get("ledger_replay", 0)
            rounds += 1
        wait_until(lambda: _live_jobs(platform, ids) == 0, timeout=600, interval=0.2)
    elapsed = time.monotonic() - started

    with session_scope(sessions) as session:
        rows = session.execute(
            select(
                ConversationUpload.id,
                ConversationUpload.status,
                ConversationUpload.last_processing_error,
                ConversationUpload.created_at,
                ConversationUpload.processed_at,
            ).where(ConversationUpload.id.in_(ids))
        ).all()
        rows_by_kind = session.execute(
            select(
                ConversationUploadDelivery.kind,
                ConversationUploadDelivery.conversation_upload_id,
                ConversationUploadDelivery.state,
            ).where(ConversationUploadDelivery.conversation_upload_id.in_(ids))
        ).all()
        ledger = {upload: state for kind, upload, state in rows_by_kind if kind == "process"}
        completions = {
            upload: state for kind, upload, state in rows_by_kind if kind == "sync_completion"
        }
        recordings = session.execute(
            select(ActiveStorageAttachment.record_id, func.count())
            .where(
                ActiveStorageAttachment.record_type == "CallDetail",
                ActiveStorageAttachment.name == "recording",
            )
            .group_by(ActiveStorageAttachment.record_id)
        ).all()

    corrupt = {i for i, (_, kind) in created.items() if kind == "corrupt"}
    statuses = {row.id: row.status for row in rows}
    assert {i for i, s in statuses.items() if s == "failed"} == corrupt
    assert all(s == "completed" for i, s in statuses.items() if i not in corrupt)
    assert all(row.last_processing_error for row in rows if row.status == "failed")
    assert set(ledger.values()) <= {"completed", "failed"}
    assert {i for i, s in ledger.items() if s == "failed"} == corrupt
    # each processed XCALLY upload handed its completion off natively, and it completed
    assert completions == {i: "completed" for i in ids if i not in corrupt}
    completed = N - len(corrupt)
    assert len(recordings) >= completed and all(count == 1 for _, count in recordings)
    # sources plus one WAV per completed upload: no orphan, no duplicate
    assert len(bucket_keys(uploads.objects)) == N + completed

    latencies = sorted(
        (row.processed_at - handed[row.id]).total_seconds()  # type: ignore[operator]
        for row in rows
        if row.processed_at is not None
    )
    figures = {
        "uploads": N,
        "organizations": ORGS,
        "completed": completed,
        "failed": len(corrupt),
        "seconds": round(elapsed, 1),
        "uploads_per_second": round(N / elapsed, 1),
        "hand_off_to_completed_p50_s": round(statistics.median(latencies), 2),
        "hand_off_to_completed_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 2),
        "reconciler_rounds": rounds,
        "reconciler_replays": replays,
    }
    print("uploads e2e figures:", json.dumps(figures))


def text_interval() -> object:
    from sqlalchemy import text

    return text("interval '11 minutes'")
