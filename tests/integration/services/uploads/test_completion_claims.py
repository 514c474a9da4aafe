"""Completion claims (seed 001): the native XCALLY hand-off takes Rails' dispatch claim
``conversation-upload/sync-completion/<id>``, so a Rails reprocess after the flags are turned
off, arriving once the pinned job's 7-day retention has passed, completes nothing a second
time; and the upload-driven completion claims the effects listed in
``PROVIDER_SYNC_NATIVE_EFFECTS``, skipping Rails' complete call when every effect is native.
Real Redis, PostgreSQL, S3 (moto's server) and workers; Rails at the local Rails server.

Rails' ``Xcally#process`` is played by :func:`rails_reprocess`, written from the seed's rule:
it claims the dispatch key before dispatching; a claim that already exists dispatches
nothing; with the completion flag on it posts the enqueue route, otherwise it enqueues the
legacy ``CompleteConversationSyncJob`` (a GoodJob row), and marks the claim delivered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.app.api import create_app
from services.app.bootstrap import Platform
from services.rails import delivery_claims
from services.uploads.completion_effects import effect_key, native_effects
from services.uploads.families import completion_job_id, process_request, sync_run_id
from services.uploads.handoff import dispatch_key, replace_completion_job
from services.uploads.object_store import S3ObjectStore
from shared.config import InvalidSettings
from shared.db.engine import session_scope
from shared.db.models import Conversation, ConversationUpload, GoodJob
from shared.rollouts import (
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING,
    CONVERSATION_UPLOAD_SYNC_COMPLETION,
)
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads, s3_settings, xcally_metadata
from tests.platform_harness import wait_until

RAILS_TOKEN = "rails-tkn"
ROUTE = "/internal/provider_conversation_sync_completions/enqueue"
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
def build(
    make_platform: MakePlatform,
    rails: RailsServer,
    objects: S3ObjectStore,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")

    def platform(**settings: Any) -> Platform:
        return make_platform(
            rails_internal_url=rails.base_url,
            rails_internal_token=RAILS_TOKEN,
            flag_overrides=dict(ALL_ON),
            **s3_settings(objects, s3_endpoint),
            **settings,
        )

    return platform


def _state(platform: Platform, job_id: str) -> str | None:
    return (platform.broker.jobs.record(job_id) or {}).get("state")


def _conversation_of(sessions: sessionmaker[Session], upload_id: int) -> int:
    with session_scope(sessions) as session:
        upload = session.get(ConversationUpload, upload_id)
        assert upload is not None and upload.conversation_id is not None
        return upload.conversation_id


def _complete_calls(rails: RailsServer, conversation_id: int) -> list[Any]:
    return rails.calls(f"/internal/conversations/{conversation_id}/complete_conversation_sync")


def _good_jobs(sessions: sessionmaker[Session], conversation_id: int) -> int:
    gid = f"gid://app/Conversation/{conversation_id}"
    with session_scope(sessions) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(GoodJob)
                .where(GoodJob.serialized_params["arguments"][0]["_aj_globalid"].astext == gid)
            )
            or 0
        )


def rails_reprocess(
    platform: Platform, client: FlaskClient, org: int, upload_id: int, conversation_id: int
) -> str:
    """Rails' ``Xcally#process`` hand-off, per the seed: claim, then dispatch once."""
    key = dispatch_key(upload_id)
    if not delivery_claims.claim(platform.sessions, key):
        return "claimed before: dispatched nothing"
    if platform.flags.rollout(CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id=org):
        request = {
            "kind": "complete_provider_conversation_sync",
            "organization_id": org,
            "conversation_upload_id": upload_id,
            "conversation_id": conversation_id,
            "sync_run_id": sync_run_id(upload_id),
        }
        answer = client.post(ROUTE, json={"requests": [request]}, headers=AUTH)
        assert answer.status_code == 202, answer.get_json()
    else:
        with session_scope(platform.sessions) as session:
            session.add(
                GoodJob(
                    job_class="CompleteConversationSyncJob",
                    queue_name="default",
                    serialized_params={
                        "job_class": "CompleteConversationSyncJob",
                        "arguments": [
                            {"_aj_globalid": f"gid://app/Conversation/{conversation_id}"}
                        ],
                    },
                )
            )
            session.commit()
    delivery_claims.mark_delivered(platform.sessions, key)
    return "dispatched"


def _process_natively(platform: Platform, uploads: Uploads, call_id: str) -> tuple[int, int]:
    upload = uploads.upload(xcally_metadata(call_id))
    platform.router.enqueue(process_request(uploads.org_id, upload))
    with running_workers(platform):
        wait_until(lambda: _state(platform, completion_job_id(upload)) == "completed", timeout=60)
    return upload, _conversation_of(uploads.sessions, upload)


@pytest.mark.parametrize("completion_flag_after", [False, True])
def test_a_rails_reprocess_after_rollback_and_retention_completes_nothing_twice(
    build: Any, rails: RailsServer, uploads: Uploads, completion_flag_after: bool
) -> None:
    # Given an XCALLY upload processed natively and completed through the pinned job
    platform = build()
    upload, conversation = _process_natively(platform, uploads, f"claims-{completion_flag_after}")
    assert len(_complete_calls(rails, conversation)) == 1
    # When the native flag is turned off (the completion flag too, or not), the pinned job's
    # 7-day retention runs out, and Rails reprocesses the upload
    platform.flags.overrides[CONVERSATION_UPLOAD_NATIVE_PROCESSING] = False
    platform.flags.overrides[CONVERSATION_UPLOAD_SYNC_COMPLETION] = completion_flag_after
    jobs = platform.broker.jobs
    jobs.client.delete(jobs.record_key(completion_job_id(upload)))
    client = create_app(platform).test_client()
    outcome = rails_reprocess(platform, client, uploads.org_id, upload, conversation)
    with running_workers(platform):
        wait_until(lambda: _state(platform, completion_job_id(upload)) in (None, "completed"))
    # Then the conversation was completed once: no second Rails call, no GoodJob row
    assert (
        len(_complete_calls(rails, conversation)) + _good_jobs(platform.sessions, conversation) == 1
    )
    assert outcome == "claimed before: dispatched nothing"
    claim = delivery_claims.find(platform.sessions, dispatch_key(upload))
    assert claim is not None and claim.resolved


def test_a_native_pass_after_rails_dispatched_hands_nothing_off(
    build: Any, rails: RailsServer, uploads: Uploads
) -> None:
    # Given Rails' processor already dispatched this upload's completion (claim delivered)
    platform = build()
    upload = uploads.upload(xcally_metadata("claims-rails-first"))
    assert delivery_claims.claim(platform.sessions, dispatch_key(upload))
    assert delivery_claims.mark_delivered(platform.sessions, dispatch_key(upload))
    # When the native pass processes it
    platform.router.enqueue(process_request(uploads.org_id, upload))
    with running_workers(platform):
        wait_until(
            lambda: _state(platform, f"conversation-upload-process-{upload}") == "completed",
            timeout=60,
        )
    # Then no completion job was handed off
    assert _state(platform, completion_job_id(upload)) is None
    assert rails.calls(f"/internal/conversation_uploads/{upload}/process_direct") == []


def test_all_effects_native_skip_rails_complete_call_and_a_replay_repeats_nothing(
    build: Any, rails: RailsServer, uploads: Uploads
) -> None:
    # Given every completion effect native
    platform = build(provider_sync_native_effects="mark_synced,summarize")
    # When an upload completes, and its completion job is then replayed
    upload, conversation = _process_natively(platform, uploads, "claims-all-native")
    summary_job = f"conversation-summary-{conversation}"
    with session_scope(platform.sessions) as session:
        synced = session.get(Conversation, conversation)
        assert synced is not None and synced.last_synced_at is not None
        first_synced = synced.last_synced_at
    assert _state(platform, summary_job) in ("waiting", "completed", "active")
    replace_completion_job(platform.router, uploads.org_id, upload, conversation)
    with running_workers(platform):
        wait_until(lambda: _state(platform, completion_job_id(upload)) == "completed")
    # Then Rails was never asked, each effect ran once under its claim
    assert _complete_calls(rails, conversation) == []
    with session_scope(platform.sessions) as session:
        again = session.get(Conversation, conversation)
        assert again is not None and again.last_synced_at == first_synced
    for effect in ("mark_synced", "summarize"):
        claim = delivery_claims.find(platform.sessions, effect_key(upload, effect))
        assert claim is not None and claim.resolved


def test_a_shorter_list_returns_the_removed_effects_to_rails(
    build: Any, rails: RailsServer, uploads: Uploads
) -> None:
    # Given only the sync mark native (the summary rolled back to Rails)
    platform = build(provider_sync_native_effects="mark_synced")
    upload, conversation = _process_natively(platform, uploads, "claims-partial")
    # Then Rails' complete call ran, naming what it must not repeat, and the mark is claimed
    (call,) = _complete_calls(rails, conversation)
    assert call.body["native_effects"] == ["mark_synced"]
    assert delivery_claims.find(platform.sessions, effect_key(upload, "summarize")) is None
    claim = delivery_claims.find(platform.sessions, effect_key(upload, "mark_synced"))
    assert claim is not None and claim.resolved


def test_an_unknown_effect_is_refused_naming_the_variable() -> None:
    assert native_effects(("summarize", "mark_synced")) == ("summarize", "mark_synced")
    with pytest.raises(InvalidSettings, match=r"PROVIDER_SYNC_NATIVE_EFFECTS: unknown.*thread"):
        native_effects(("mark_synced", "thread"))
