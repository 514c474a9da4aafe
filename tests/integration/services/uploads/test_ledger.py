"""The durable delivery ledger on real Redis and PostgreSQL: the accepted mark after the
enqueue, the completed mark after processing, and the reconciler's order, budget and race."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.app.api import create_app
from services.app.bootstrap import Platform
from services.uploads.families import process_request
from services.uploads.reconciler import reconcile
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import (
    ActiveStorageAttachment,
    Conversation,
    ConversationUpload,
    ConversationUploadDelivery,
)
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.knowledge_sync.test_route import RedisServer
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads
from tests.platform_harness import wait_until

RAILS_TOKEN = "rails-tkn"
ROUTE = "/internal/conversation_uploads/enqueue"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url, rails_internal_token=RAILS_TOKEN, rails_timeout_seconds=2
    )


def _delivery(sessions: sessionmaker[Session], org: int, upload_id: int, **fields: Any) -> int:
    kind = fields.pop("kind", "process")
    age = fields.pop("age_minutes", 11)
    with session_scope(sessions) as session:
        row = ConversationUploadDelivery(
            organization_id=org,
            conversation_upload_id=upload_id,
            kind=kind,
            delivery_key=f"conversation-upload/{kind.replace('_', '-')}/{upload_id}",
            **fields,
        )
        session.add(row)
        session.flush()
        row.updated_at = utcnow() - timedelta(minutes=age)
        session.commit()
        return row.id


def _row(sessions: sessionmaker[Session], row_id: int) -> ConversationUploadDelivery:
    with session_scope(sessions) as session:
        row = session.get(ConversationUploadDelivery, row_id)
        assert row is not None
        session.expunge(row)
        return row


def _age(sessions: sessionmaker[Session], row_id: int) -> None:
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.id == row_id)
            .values(updated_at=utcnow() - timedelta(minutes=11))
        )
        session.commit()


def _body(org: int, upload_id: int) -> dict[str, Any]:
    return {
        "requests": [
            {
                "kind": "process_conversation_upload",
                "organization_id": org,
                "conversation_upload_id": upload_id,
            }
        ]
    }


def _job_state(platform: Platform, job_id: str) -> str | None:
    return (platform.broker.jobs.record(job_id) or {}).get("state")


def test_a_lost_response_is_retried_without_a_second_job_and_the_row_completes(
    app: Flask, platform: Platform, uploads: Uploads, rails: RailsServer
) -> None:
    # Given Rails' ledger row, sent, and a hand-off whose 202 Rails never saw
    upload = uploads.upload({}, source="five9")
    row = _delivery(uploads.sessions, uploads.org_id, upload, state="sent", age_minutes=0)
    client = app.test_client()
    first = client.post(ROUTE, json=_body(uploads.org_id, upload), headers=AUTH)
    assert _row(uploads.sessions, row).state == "accepted"
    # When Rails retries the POST
    second = client.post(ROUTE, json=_body(uploads.org_id, upload), headers=AUTH)

    # Then the retry collapsed onto the queued job, which runs once and completes the row
    assert [first.get_json()["jobs"][0]["outcome"], second.get_json()["jobs"][0]["outcome"]] == [
        "added",
        "deduplicated",
    ]
    with running_workers(platform):
        wait_until(lambda: _row(uploads.sessions, row).state == "completed")
    assert len(rails.calls(f"/internal/conversation_uploads/{upload}/process_direct")) == 1
    final = _row(uploads.sessions, row)
    assert (final.owner, final.accepted_at is not None, final.completed_at is not None) == (
        "api2",
        True,
        True,
    )


def test_a_failed_accepted_mark_never_fails_the_hand_off(
    app: Flask, platform: Platform, uploads: Uploads, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.uploads import ledger

    def broken(*_args: object) -> int:
        raise RuntimeError("ledger unwritable")

    monkeypatch.setattr(ledger, "mark_accepted", broken)
    upload = uploads.upload({}, source="five9")

    answer = app.test_client().post(ROUTE, json=_body(uploads.org_id, upload), headers=AUTH)

    assert answer.status_code == 202
    assert _job_state(platform, f"conversation-upload-process-{upload}") == "waiting"


def test_redis_losing_the_hand_off_is_repaired_by_the_reconciler(
    platform: Platform, uploads: Uploads
) -> None:
    # Given a row Rails marked uncertain (its POST timed out) and no job in Redis
    upload = uploads.upload({}, source="five9")
    row = _delivery(uploads.sessions, uploads.org_id, upload, state="uncertain")

    summary = platform.tick("conversation-upload-checks").run("2026-12-01T12:00Z")

    # Then the tick re-added the job and claimed one replay
    assert summary["ledger_replay"] >= 1
    assert _job_state(platform, f"conversation-upload-process-{upload}") == "waiting"
    claimed = _row(uploads.sessions, row)
    assert (claimed.state, claimed.replay_count, claimed.owner) == ("accepted", 1, "api2")


def test_the_replay_budget_of_three_then_failed(platform: Platform, uploads: Uploads) -> None:
    upload = uploads.upload({}, source="five9")
    row = _delivery(uploads.sessions, uploads.org_id, upload, state="sent")
    finished = {"state": "completed"}  # each replayed job ends without an outcome

    for expected in (1, 2, 3):
        _age(uploads.sessions, row)
        reconcile(uploads.sessions, platform.router, lambda _id: finished["state"], utcnow())
        assert _row(uploads.sessions, row).replay_count == expected
    _age(uploads.sessions, row)
    counts = reconcile(uploads.sessions, platform.router, lambda _id: "completed", utcnow())

    failed = _row(uploads.sessions, row)
    assert (failed.state, failed.replay_count) == ("failed", 3)
    assert failed.last_error == "replay budget of 3 exhausted" and failed.failed_at is not None
    assert counts.get("failed", 0) >= 1


def test_two_reconcilers_racing_replay_once(platform: Platform, uploads: Uploads) -> None:
    upload = uploads.upload({}, source="five9")
    row = _delivery(uploads.sessions, uploads.org_id, upload, state="accepted")
    both_decided = threading.Barrier(2)

    def job_state(job_id: str) -> str | None:
        if job_id == f"conversation-upload-process-{upload}":
            both_decided.wait(timeout=20)  # both have read the row before either claims
        return None

    results: list[dict[str, int]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                reconcile(uploads.sessions, platform.router, job_state, utcnow())
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sum(r.get("replay", 0) for r in results) == 1
    assert sum(r.get("lost_race", 0) for r in results) == 1
    assert _row(uploads.sessions, row).replay_count == 1


def test_the_reconciler_settles_rows_in_the_seeds_order(
    platform: Platform, uploads: Uploads
) -> None:
    org, sessions = uploads.org_id, uploads.sessions
    completed = uploads.upload({}, source="five9", status="completed")
    live = uploads.upload({}, source="five9")
    no_file = uploads.upload({}, source="five9")
    fresh = uploads.upload({}, source="five9")
    with session_scope(sessions) as session:
        session.execute(
            ActiveStorageAttachment.__table__.delete().where(
                ActiveStorageAttachment.record_id == no_file,
                ActiveStorageAttachment.record_type == "ConversationUpload",
            )
        )
        synced = Conversation(organization_id=org, last_synced_at=utcnow())
        unsynced = Conversation(organization_id=org)
        session.add_all([synced, unsynced])
        session.commit()
        synced_id, unsynced_id = synced.id, unsynced.id
    processing = uploads.upload({}, source="xcally", status="processing")
    rows = {
        "completed": _delivery(sessions, org, completed, state="sent"),
        "live": _delivery(sessions, org, live, state="accepted"),
        "no_file": _delivery(sessions, org, no_file, state="uncertain"),
        "fresh": _delivery(sessions, org, fresh, state="sent", age_minutes=2),
        "synced": _delivery(
            sessions,
            org,
            completed,
            kind="sync_completion",
            state="accepted",
            conversation_id=synced_id,
        ),
        "owned_by_rails": _delivery(
            sessions,
            org,
            processing,
            kind="sync_completion",
            state="sent",
            conversation_id=unsynced_id,
        ),
    }
    with session_scope(sessions) as session:
        gone = Conversation(organization_id=org)
        session.add(gone)
        session.flush()
        gone_id = gone.id
        session.commit()
    rows["gone"] = _delivery(
        sessions, org, fresh, kind="sync_completion", state="sent", conversation_id=gone_id
    )
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.id == rows["gone"])
            .values(conversation_id=None, updated_at=utcnow() - timedelta(minutes=11))
        )
        session.commit()
    platform.router.enqueue(process_request(org, live))

    platform.tick("conversation-upload-checks").run("2026-12-01T12:30Z")

    states = {name: _row(sessions, row_id).state for name, row_id in rows.items()}
    assert states == {
        "completed": "completed",
        "live": "accepted",
        "no_file": "failed",
        "fresh": "sent",
        "synced": "completed",
        "owned_by_rails": "sent",
        "gone": "failed",
    }
    assert _row(sessions, rows["no_file"]).last_error == "the upload's file is gone"
    assert _row(sessions, rows["live"]).replay_count == 0


def test_the_same_idempotency_key_cannot_make_two_uploads(
    db_session_factory: sessionmaker[Session], uploads: Uploads
) -> None:
    key = "direct:" + "ab" * 32
    uploads.upload({}, idempotency_key=key)

    with pytest.raises(IntegrityError), session_scope(db_session_factory) as session:
        session.add(
            ConversationUpload(
                organization_id=uploads.org_id, upload_type="direct", idempotency_key=key
            )
        )
        session.commit()
    with session_scope(db_session_factory) as session:
        count = session.execute(
            select(ConversationUpload.id).where(ConversationUpload.idempotency_key == key)
        ).all()
    assert len(count) == 1


def _restart(server: RedisServer) -> None:
    """The same Redis coming back (empty) on the same port."""
    command = [
        server.process.args[0],
        "--port",
        str(server.port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    server.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    probe = redis.Redis.from_url(server.url)
    try:
        wait_until(lambda: _pings(probe), timeout=10)
    finally:
        probe.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_redis_down_at_the_hand_off_then_the_reconciler_re_adds_the_job(
    tmp_path: Path, make_platform: MakePlatform, rails: RailsServer, uploads: Uploads
) -> None:
    # Given Rails' ledger row committed with the upload, and the API on a Redis that dies
    server = RedisServer(tmp_path)
    try:
        platform = make_platform(
            redis_url=server.url,
            rails_internal_url=rails.base_url,
            rails_internal_token=RAILS_TOKEN,
        )
        client = create_app(platform).test_client()
        upload = uploads.upload({}, source="five9")
        row = _delivery(uploads.sessions, uploads.org_id, upload, state="pending", age_minutes=0)
        server.kill()

        # When Rails hands the upload off: a 503, its proven rejection, parks the row
        answer = client.post(ROUTE, json=_body(uploads.org_id, upload), headers=AUTH)
        assert answer.status_code == 503
        assert _row(uploads.sessions, row).state == "pending"
        with session_scope(uploads.sessions) as session:
            session.execute(
                update(ConversationUploadDelivery)
                .where(ConversationUploadDelivery.id == row)
                .values(attempts=1, next_attempt_at=utcnow() - timedelta(seconds=1))
            )
            session.commit()

        # And Redis comes back; the next tick's reconciler takes the parked row
        _restart(server)
        summary = platform.tick("conversation-upload-checks").run("2026-12-01T13:00Z")

        # Then the job is in Redis again and the row is API2's, accepted, one replay spent
        assert summary["ledger_replay"] >= 1
        assert _job_state(platform, f"conversation-upload-process-{upload}") == "waiting"
        claimed = _row(uploads.sessions, row)
        assert (claimed.state, claimed.owner, claimed.replay_count) == ("accepted", "api2", 1)
    finally:
        server.kill()
