"""XCALLY completion (ENG-2948) on real Redis, PostgreSQL and workers, with Rails at the local
Rails server: the enqueue route (auth, 400, 409 with the flag off, 202 and dedupe), the job
pinned by ``sync_run_id`` and kept 7 days, its ``complete_conversation_sync`` call claimed
through ``deliver_once``, the failure contract, and the reconciler's ``sync_completion`` rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text, update
from sqlalchemy.orm import Session, sessionmaker

from services.app.api import create_app
from services.app.bootstrap import Platform
from services.rails import delivery_claims
from services.uploads.completion import claim_key
from services.uploads.families import (
    COMPLETION_RETENTION_SECONDS,
    completion_job_id,
    completion_request,
    sync_run_id,
)
from services.uploads.reconciler import reconcile
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import Conversation, ConversationUploadDelivery
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads
from tests.platform_harness import wait_until
from tiers.policies import RetryPolicy

RAILS_TOKEN = "rails-tkn"
ROUTE = "/internal/provider_conversation_sync_completions/enqueue"
FLAG = "api2_conversation_upload_sync_completion"
TWO_FAST = RetryPolicy(max_attempts=2, base_seconds=0.2)


def complete_path(conversation_id: int) -> str:
    return f"/internal/conversations/{conversation_id}/complete_conversation_sync"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


def _platform(make_platform: MakePlatform, rails: RailsServer, *, on: bool = True) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        rails_timeout_seconds=2.5,  # under the slow answers' 3 s, over a loaded machine's delays
        flag_overrides={FLAG: on},
        retries={"provider_conversation_sync_completion": TWO_FAST},
    )


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer) -> Platform:
    return _platform(make_platform, rails)


@pytest.fixture
def client(platform: Platform) -> FlaskClient:
    return create_app(platform).test_client()


def _conversation(sessions: sessionmaker[Session], org: int) -> int:
    with session_scope(sessions) as session:
        conversation = Conversation(organization_id=org)
        session.add(conversation)
        session.commit()
        return conversation.id


def _ledger(
    sessions: sessionmaker[Session], org: int, upload_id: int, conversation_id: int, **fields: Any
) -> int:
    age = fields.pop("age_minutes", 0)
    with session_scope(sessions) as session:
        row = ConversationUploadDelivery(
            organization_id=org,
            conversation_upload_id=upload_id,
            conversation_id=conversation_id,
            kind="sync_completion",
            delivery_key=f"conversation-upload/sync-completion/{upload_id}",
            sync_run_id=sync_run_id(upload_id),
            **fields,
        )
        session.add(row)
        session.flush()
        row.updated_at = utcnow() - timedelta(minutes=age)
        session.commit()
        return row.id


def _age(sessions: sessionmaker[Session], row_id: int) -> None:
    with session_scope(sessions) as session:
        session.execute(
            update(ConversationUploadDelivery)
            .where(ConversationUploadDelivery.id == row_id)
            .values(updated_at=utcnow() - timedelta(minutes=11))
        )
        session.commit()


def _row(sessions: sessionmaker[Session], row_id: int) -> ConversationUploadDelivery:
    with session_scope(sessions) as session:
        row = session.get(ConversationUploadDelivery, row_id)
        assert row is not None
        session.expunge(row)
        return row


def _body(org: int, upload_id: int, conversation_id: int, **item: Any) -> dict[str, Any]:
    request = {
        "kind": "complete_provider_conversation_sync",
        "organization_id": org,
        "conversation_upload_id": upload_id,
        "conversation_id": conversation_id,
        "sync_run_id": sync_run_id(upload_id),
        **item,
    }
    return {"requests": [request]}


def _state(platform: Platform, job_id: str) -> str | None:
    return (platform.broker.jobs.record(job_id) or {}).get("state")


def _claim(platform: Platform, upload_id: int) -> delivery_claims.Claim | None:
    return delivery_claims.find(platform.sessions, claim_key(upload_id))


def test_the_route_refuses_bad_input_and_a_disabled_flag(
    make_platform: MakePlatform, rails: RailsServer, uploads: Uploads
) -> None:
    upload = uploads.upload({}, status="completed")
    conversation = _conversation(uploads.sessions, uploads.org_id)
    on = create_app(_platform(make_platform, rails)).test_client()
    assert on.post(ROUTE, json=_body(uploads.org_id, upload, conversation)).status_code == 401
    wrong = on.post(
        ROUTE,
        json=_body(uploads.org_id, upload, conversation, sync_run_id=f"xcally-upload-{upload + 1}"),
        headers=AUTH,
    )
    assert wrong.status_code == 409 and wrong.get_json()["error"] == "conflicting_fields"
    assert "requests[0].sync_run_id" in wrong.get_json()["fields"]
    missing = on.post(
        ROUTE,
        json={"requests": [{"kind": "complete_provider_conversation_sync", "organization_id": 1}]},
        headers=AUTH,
    )
    assert missing.status_code == 400
    assert "requests[0].conversation_id" in missing.get_json()["fields"]

    off_platform = _platform(make_platform, rails, on=False)
    off = create_app(off_platform).test_client()
    refused = off.post(ROUTE, json=_body(uploads.org_id, upload, conversation), headers=AUTH)
    assert refused.status_code == 409
    assert refused.get_json()["error"] == "sync_completion_disabled"
    assert FLAG in refused.get_json()["message"]
    assert _state(off_platform, completion_job_id(upload)) is None


def test_one_completion_per_upload_and_a_late_retry_is_deduplicated(
    platform: Platform, client: FlaskClient, rails: RailsServer, uploads: Uploads
) -> None:
    org, sessions = uploads.org_id, uploads.sessions
    upload = uploads.upload({}, status="completed")
    conversation = _conversation(sessions, org)
    row = _ledger(sessions, org, upload, conversation, state="sent", owner="rails")

    first = client.post(ROUTE, json=_body(org, upload, conversation), headers=AUTH)
    again = client.post(ROUTE, json=_body(org, upload, conversation), headers=AUTH)

    assert first.status_code == 202 and again.status_code == 202
    job_id = f"provider_conversation_sync_completion_xcally-upload-{upload}"
    assert [j["outcome"] for j in first.get_json()["jobs"] + again.get_json()["jobs"]] == [
        "added",
        "deduplicated",
    ]
    assert first.get_json()["jobs"][0]["job_id"] == job_id
    assert (_row(sessions, row).state, _row(sessions, row).owner) == ("accepted", "api2")

    with running_workers(platform):
        wait_until(lambda: _state(platform, job_id) == "completed", timeout=30)
    late = client.post(ROUTE, json=_body(org, upload, conversation), headers=AUTH)

    assert late.get_json()["jobs"][0]["outcome"] == "deduplicated"
    ttl = platform.broker.jobs.client.pttl(platform.broker.jobs.record_key(job_id))
    assert ttl > (COMPLETION_RETENTION_SECONDS - 60) * 1000
    calls = rails.calls(complete_path(conversation))
    assert len(calls) == 1
    assert calls[0].body == {
        "organization_id": org,
        "conversation_upload_id": upload,
        "sync_run_id": f"xcally-upload-{upload}",
    }
    claim = _claim(platform, upload)
    assert claim is not None and claim.resolved
    assert _row(sessions, row).state == "completed"


def test_a_proven_rejection_releases_the_claim(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    org, sessions = uploads.org_id, uploads.sessions
    retried, rejected = (uploads.upload({}, status="completed") for _ in range(2))
    conv_retried, conv_rejected = (_conversation(sessions, org) for _ in range(2))
    row = _ledger(sessions, org, rejected, conv_rejected, state="accepted")
    rails.reject(complete_path(conv_retried), 500, "PG::ConnectionBad", retryable=True)
    rails.reject(complete_path(conv_rejected), 422, "ActiveRecord::RecordInvalid", times=2)
    platform.router.enqueue(completion_request(org, retried, conv_retried))
    platform.router.enqueue(completion_request(org, rejected, conv_rejected))

    with running_workers(platform):
        wait_until(lambda: _state(platform, completion_job_id(retried)) == "completed", 30)
        wait_until(lambda: _state(platform, completion_job_id(rejected)) == "failed", 30)

    # 500, released, retried: sent once more and delivered
    assert len(rails.calls(complete_path(conv_retried))) == 2
    claim = _claim(platform, retried)
    assert claim is not None and claim.resolved
    # 422: released, the job failed at once, the ledger row failed with Rails' error
    assert len(rails.calls(complete_path(conv_rejected))) == 1
    assert _claim(platform, rejected) is None
    failed = _row(sessions, row)
    assert failed.state == "failed" and "RecordInvalid" in (failed.last_error or "")


def test_an_ambiguous_call_stays_uncertain_until_resolved_by_hand(
    platform: Platform, rails: RailsServer, uploads: Uploads, caplog: pytest.LogCaptureFixture
) -> None:
    """A timeout after Rails may have completed: no resend, the claim left for an operator,
    the reconciler's replays send nothing; released by hand, the next replay completes."""
    org, sessions = uploads.org_id, uploads.sessions
    upload = uploads.upload({}, status="completed")
    conversation = _conversation(sessions, org)
    row = _ledger(sessions, org, upload, conversation, state="accepted")
    rails.fail(complete_path(conversation), "slow", delay=3.0)
    platform.router.enqueue(completion_request(org, upload, conversation))
    job_id = completion_job_id(upload)

    with caplog.at_level(logging.WARNING), running_workers(platform):
        wait_until(lambda: _state(platform, job_id) == "completed", timeout=30)
        claim = _claim(platform, upload)
        assert claim is not None and not claim.resolved
        assert "xcally sync completion delivery outcome uncertain" in caplog.text
        assert _row(sessions, row).state == "accepted"

        # the claim is past its lease: the reconciler's replay re-runs the job, which
        # finds the unresolved claim and sends nothing (budget spent, claim left)
        with session_scope(sessions) as session:
            session.execute(
                text(
                    "UPDATE outbound_delivery_claims SET created_at = created_at - interval"
                    " '5 minutes' WHERE delivery_key = :key"
                ),
                {"key": claim_key(upload)},
            )
            session.commit()
        _age(sessions, row)
        first_run = (platform.broker.jobs.record(job_id) or {})["msg"]
        counts = reconcile(sessions, platform.router, lambda j: _state(platform, j), utcnow())
        assert counts == {"replay": 1}
        # the finished record (kept 7 days) was replaced, not deduplicated onto
        assert (platform.broker.jobs.record(job_id) or {})["msg"] != first_run
        wait_until(lambda: _row(sessions, row).replay_count == 1, timeout=5)
        wait_until(lambda: _state(platform, job_id) == "completed", timeout=30)
        assert len(rails.calls(complete_path(conversation))) == 1
        assert _row(sessions, row).state == "accepted"

        # the operator finds Rails did not complete it: release!, and the next replay sends
        assert delivery_claims.release(sessions, claim_key(upload))
        _age(sessions, row)
        assert reconcile(sessions, platform.router, lambda j: _state(platform, j), utcnow()) == {
            "replay": 1
        }
        wait_until(lambda: _row(sessions, row).state == "completed", timeout=30)
    assert len(rails.calls(complete_path(conversation))) == 2
    final = _claim(platform, upload)
    assert final is not None and final.resolved


def test_the_reconciler_replays_sync_completion_only_once_the_upload_completed(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    org, sessions = uploads.org_id, uploads.sessions
    processing = uploads.upload({}, status="processing")
    done = uploads.upload({}, status="completed")
    failed_upload = uploads.upload({}, status="failed")
    live = uploads.upload({}, status="completed")
    conversations = [_conversation(sessions, org) for _ in range(4)]
    rows = {
        "owned_by_rails": _ledger(
            sessions, org, processing, conversations[0], state="sent", age_minutes=11
        ),
        "lost": _ledger(sessions, org, done, conversations[1], state="uncertain", age_minutes=11),
        "upload_failed": _ledger(
            sessions, org, failed_upload, conversations[2], state="sent", age_minutes=11
        ),
        "live": _ledger(sessions, org, live, conversations[3], state="accepted", age_minutes=11),
    }
    platform.router.enqueue(completion_request(org, live, conversations[3]))
    synced: list[int] = []
    rails.on_complete_sync = lambda conversation_id, _body: synced.append(conversation_id)

    counts = reconcile(sessions, platform.router, lambda j: _state(platform, j), utcnow())

    assert counts == {"wait": 2, "failed": 1, "replay": 1}
    states = {name: _row(sessions, row_id).state for name, row_id in rows.items()}
    assert states == {
        "owned_by_rails": "sent",
        "lost": "accepted",
        "upload_failed": "failed",
        "live": "accepted",
    }
    assert _row(sessions, rows["lost"]).replay_count == 1
    assert _state(platform, completion_job_id(processing)) is None
    with running_workers(platform):
        wait_until(lambda: _row(sessions, rows["lost"]).state == "completed", timeout=30)
        wait_until(lambda: _row(sessions, rows["live"]).state == "completed", timeout=30)
    assert sorted(synced) == sorted([conversations[1], conversations[3]])


def test_the_flag_turned_off_skips_a_queued_job(
    make_platform: MakePlatform, rails: RailsServer, uploads: Uploads
) -> None:
    off = _platform(make_platform, rails, on=False)
    upload = uploads.upload({}, status="completed")
    conversation = _conversation(uploads.sessions, uploads.org_id)
    off.router.enqueue(completion_request(uploads.org_id, upload, conversation))

    with running_workers(off):
        wait_until(lambda: _state(off, completion_job_id(upload)) == "skipped", timeout=30)

    assert rails.calls(complete_path(conversation)) == []
    assert _claim(off, upload) is None
