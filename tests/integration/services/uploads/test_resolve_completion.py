"""``speedtier uploads resolve-completion``, run as the command line runs it, on real Redis,
PostgreSQL, workers and Rails at the local server: an uncertain XCALLY completion resolved
in one go from the pinned job's state and the claim and ledger rows, and every refusal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from services.app.cli import main
from services.rails import delivery_claims
from services.uploads.completion import claim_key
from services.uploads.families import completion_job_id, completion_request
from services.uploads.resolution import dispatch_key
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import Conversation, ConversationUploadDelivery
from shared.rollouts import CONVERSATION_UPLOAD_SYNC_COMPLETION
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads
from tests.platform_harness import wait_until

RAILS_TOKEN = "rails-tkn"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        rails_timeout_seconds=2.5,  # under the slow answers' 3 s, over a loaded machine's delays
        flag_overrides={CONVERSATION_UPLOAD_SYNC_COMPLETION: True},
    )


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, database_url: str, namespace: str
) -> CliRunner:
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "SPEEDTIER_FLAG_CACHE_SECONDS": "0",
        "SPEEDTIER_FLAGS": json.dumps({CONVERSATION_UPLOAD_SYNC_COMPLETION: True}),
    }.items():
        monkeypatch.setenv(name, value)
    return CliRunner()


def resolve(cli: CliRunner, *args: Any) -> Result:
    return cli.invoke(main, ["uploads", "resolve-completion", *map(str, args)])


def _completed_upload(uploads: Uploads, *, synced: bool = False, **row: Any) -> tuple[int, int]:
    """A completed XCALLY upload, its conversation and (``row``: its fields) its
    ``sync_completion`` ledger row."""
    with session_scope(uploads.sessions) as session:
        conversation = Conversation(
            organization_id=uploads.org_id, last_synced_at=utcnow() if synced else None
        )
        session.add(conversation)
        session.commit()
        conversation_id = conversation.id
    upload = uploads.upload({}, status="completed", conversation_id=conversation_id)
    if row:
        with session_scope(uploads.sessions) as session:
            session.add(
                ConversationUploadDelivery(
                    organization_id=uploads.org_id,
                    conversation_upload_id=upload,
                    conversation_id=conversation_id,
                    kind="sync_completion",
                    delivery_key=dispatch_key(upload),
                    sync_run_id=f"xcally-upload-{upload}",
                    **row,
                )
            )
            session.commit()
    return upload, conversation_id


def _row_state(sessions: sessionmaker[Session], upload_id: int) -> str | None:
    with session_scope(sessions) as session:
        return session.execute(
            select(ConversationUploadDelivery.state).where(
                ConversationUploadDelivery.conversation_upload_id == upload_id,
                ConversationUploadDelivery.kind == "sync_completion",
            )
        ).scalar()


def _claim(sessions: sessionmaker[Session], key: str) -> delivery_claims.Claim | None:
    return delivery_claims.find(sessions, key)


def _state(platform: Platform, upload_id: int) -> str | None:
    return (platform.broker.jobs.record(completion_job_id(upload_id)) or {}).get("state")


def _complete_path(conversation_id: int) -> str:
    return f"/internal/conversations/{conversation_id}/complete_conversation_sync"


def test_an_ambiguous_completion_call_is_released_and_re_driven_in_one_go(
    cli: CliRunner, platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    # Given a completion job whose Rails call timed out: the job completed, its claim is
    # unresolved and the conversation was not synced
    sessions = uploads.sessions
    upload, conversation = _completed_upload(uploads, state="accepted", owner="api2")
    call_key = claim_key(upload)
    rails.fail(_complete_path(conversation), "slow", delay=3.0)
    platform.router.enqueue(completion_request(uploads.org_id, upload, conversation))
    with running_workers(platform):
        wait_until(lambda: _state(platform, upload) == "completed", timeout=30)
    first_message = (platform.broker.jobs.record(completion_job_id(upload)) or {})["msg"]

    # When the operator runs the command without an option, it reports and refuses
    undecided = resolve(cli, upload)
    assert undecided.exit_code == 1, undecided.output
    assert f"job {completion_job_id(upload)}: completed" in undecided.output
    assert f"claim {call_key} (the completion call): unresolved since" in undecided.output
    assert f"claim {dispatch_key(upload)} (Rails' hand-off): none" in undecided.output
    assert "Error: complete_conversation_sync's outcome is uncertain" in undecided.output
    claim = _claim(sessions, call_key)
    assert claim is not None and not claim.resolved  # nothing was written

    # And having found in Rails that it did not land, runs it with --release
    released = resolve(cli, upload, "--release")

    # Then the claim is released, the row accepted and the finished job replaced
    assert released.exit_code == 0, released.output
    assert f"did: released: {call_key}" in released.output
    assert f"did: re-added {completion_job_id(upload)} (replaced)" in released.output
    record = platform.broker.jobs.record(completion_job_id(upload)) or {}
    assert (record["state"], record["msg"] != first_message) == ("waiting", True)
    # And the re-driven job sends once more and completes the row
    with running_workers(platform):
        wait_until(lambda: _row_state(sessions, upload) == "completed", timeout=30)
    assert len(rails.calls(_complete_path(conversation))) == 2
    claim = _claim(sessions, call_key)
    assert claim is not None and claim.resolved
    # And there is nothing left to resolve
    again = resolve(cli, upload)
    assert again.exit_code == 1 and "nothing to resolve" in again.output


def test_a_landed_completion_call_is_marked_delivered(
    cli: CliRunner, platform: Platform, uploads: Uploads
) -> None:
    sessions = uploads.sessions
    # Given two unresolved call claims: one conversation synced (Rails' evidence), one not
    synced, _ = _completed_upload(uploads, synced=True, state="accepted")
    unsynced, _ = _completed_upload(uploads, state="failed", last_error="replay budget")
    for upload in (synced, unsynced):
        assert delivery_claims.claim(sessions, claim_key(upload))

    # Then --release contradicts the sync and is refused, without writing anything
    contradicted = resolve(cli, synced, "--release")
    assert contradicted.exit_code == 1
    assert "complete_conversation_sync landed; use --mark-delivered" in contradicted.output
    assert _row_state(sessions, synced) == "accepted"
    # And without an option the synced one is marked delivered, its row completed
    evidenced = resolve(cli, synced)
    assert evidenced.exit_code == 0, evidenced.output
    assert f"did: marked delivered: {claim_key(synced)}" in evidenced.output
    assert "did: ledger sync_completion: accepted -> completed" in evidenced.output
    # And the operator's --mark-delivered settles the other one, even its failed row
    confirmed = resolve(cli, unsynced, "--mark-delivered")
    assert confirmed.exit_code == 0, confirmed.output
    for upload in (synced, unsynced):
        claim = _claim(sessions, claim_key(upload))
        assert claim is not None and claim.resolved
        assert _row_state(sessions, upload) == "completed"
        assert _state(platform, upload) is None  # nothing re-added


def test_rails_hand_off_claim_follows_the_pinned_job(
    cli: CliRunner, platform: Platform, uploads: Uploads
) -> None:
    sessions = uploads.sessions
    # Given Rails' hand-off claims left unresolved (its POST to the enqueue route timed out)
    lost, _ = _completed_upload(uploads, state="uncertain", owner="rails")
    landed, _ = _completed_upload(uploads, state="uncertain", owner="rails")
    for upload in (lost, landed):
        assert delivery_claims.claim(sessions, dispatch_key(upload))
    # the landed hand-off's job ran and delivered (its call claim is delivered)
    assert delivery_claims.claim(sessions, claim_key(landed))
    assert delivery_claims.mark_delivered(sessions, claim_key(landed))

    # Then no job for "lost": --mark-delivered is refused, no option releases and re-drives
    wrong = resolve(cli, lost, "--mark-delivered")
    assert wrong.exit_code == 1 and "the hand-off did not land" in wrong.output
    redriven = resolve(cli, lost)
    assert redriven.exit_code == 0, redriven.output
    assert f"did: released: {dispatch_key(lost)}" in redriven.output
    assert f"did: re-added {completion_job_id(lost)} (added)" in redriven.output
    assert _claim(sessions, dispatch_key(lost)) is None
    assert (_state(platform, lost), _row_state(sessions, lost)) == ("waiting", "accepted")
    # And while that job is queued the command waits for it
    queued = resolve(cli, lost)
    assert queued.exit_code == 1
    assert f"{completion_job_id(lost)} is waiting: let it finish" in queued.output

    # And the job of "landed" ran: --release is refused, no option marks it delivered
    refused = resolve(cli, landed, "--release")
    assert refused.exit_code == 1 and "the hand-off landed" in refused.output
    marked = resolve(cli, landed)
    assert marked.exit_code == 0, marked.output
    claim = _claim(sessions, dispatch_key(landed))
    assert claim is not None and claim.resolved
    assert _state(platform, landed) is None


def test_refusals_are_one_line_and_write_nothing(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch, platform: Platform, uploads: Uploads
) -> None:
    sessions = uploads.sessions
    # bad input: not an id, both options, an unknown upload
    assert resolve(cli, "abc").exit_code == 2
    both = resolve(cli, 1, "--release", "--mark-delivered")
    assert both.exit_code == 2 and "exclude each other" in both.output
    unknown = resolve(cli, 2**62)
    assert unknown.exit_code == 1
    assert unknown.output.strip() == f"Error: no conversation upload {2**62}"
    # a hand-off to re-drive while the upload's processor still owns it
    processing = uploads.upload({}, status="processing")
    assert delivery_claims.claim(sessions, dispatch_key(processing))
    owned = resolve(cli, processing)
    assert owned.exit_code == 1 and f"upload {processing} is processing" in owned.output
    # a re-drive with the completion flag off (the job would skip)
    upload, _ = _completed_upload(uploads, state="uncertain")
    assert delivery_claims.claim(sessions, claim_key(upload))
    monkeypatch.setenv("SPEEDTIER_FLAGS", json.dumps({CONVERSATION_UPLOAD_SYNC_COMPLETION: False}))
    off = resolve(cli, upload, "--release")
    assert off.exit_code == 1
    assert f"{CONVERSATION_UPLOAD_SYNC_COMPLETION} is off for organization" in off.output
    errors = [line for line in off.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1
    # nothing was written by any refusal
    for key in (dispatch_key(processing), claim_key(upload)):
        claim = _claim(sessions, key)
        assert claim is not None and not claim.resolved
    assert _row_state(sessions, upload) == "uncertain"
    assert _state(platform, upload) is None and _state(platform, processing) is None
