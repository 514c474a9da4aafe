"""The summary enqueue route Rails' Api2ConversationSummaryEnqueuer calls (auth, 400, 202,
dedupe, 503 so Rails falls back) and the job calling Rails' summarize endpoint."""

from __future__ import annotations

from pathlib import Path

from flask.testing import FlaskClient

from services.app.api import create_app
from services.app.bootstrap import Platform
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.knowledge_sync.test_route import RedisServer
from tests.integration.services.maintenance.factories import running_workers
from tests.platform_harness import wait_until

ROUTE = "/internal/conversation_summaries/enqueue"


def body(conversation_id: object = 42, organization_id: object = 7) -> dict[str, object]:
    return {
        "requests": [
            {
                "kind": "summarize_conversation",
                "organization_id": organization_id,
                "conversation_id": conversation_id,
            }
        ]
    }


def test_without_the_token_the_route_answers_401(client: FlaskClient) -> None:
    assert client.post(ROUTE, json=body()).status_code == 401


def test_a_bad_request_answers_400_naming_the_field(client: FlaskClient) -> None:
    answer = client.post(ROUTE, json=body(conversation_id="x"), headers=AUTH)
    assert answer.status_code == 400
    assert "requests[0].conversation_id" in answer.get_data(as_text=True)
    other_kind = {"requests": [{"kind": "fix_counter_caches", "organization_id": None}]}
    assert client.post(ROUTE, json=other_kind, headers=AUTH).status_code == 400


def test_accepted_then_deduplicated_then_summarized_by_rails(
    client: FlaskClient, platform: Platform, rails: RailsServer
) -> None:
    first = client.post(ROUTE, json=body(), headers=AUTH)
    second = client.post(ROUTE, json=body(), headers=AUTH)
    assert first.status_code == second.status_code == 202
    assert first.get_json()["jobs"][0]["job_id"] == "conversation-summary-42"
    assert first.get_json()["jobs"][0]["outcome"] == "added"
    assert second.get_json()["jobs"][0]["outcome"] == "deduplicated"
    with running_workers(platform):
        wait_until(
            lambda: (
                (platform.broker.jobs.record("conversation-summary-42") or {}).get("state")
                == "completed"
            )
        )
    (call,) = rails.calls("/internal/conversations/42/summarize")
    assert call.body == {"organization_id": 7}


def test_while_redis_is_down_rails_gets_a_503_and_falls_back(
    tmp_path: Path, make_platform: MakePlatform
) -> None:
    # Given the API on a Redis that then goes away
    server = RedisServer(tmp_path)
    try:
        platform = make_platform(redis_url=server.url)
        client = create_app(platform).test_client()
        assert client.post(ROUTE, json=body(conversation_id=5), headers=AUTH).status_code == 202
        server.kill()
        # When Rails' enqueuers call: a non-2xx, its proven delivery error (summary: fall back
        # to SummarizeConversationJob; merge_into!: log and report, the merge goes on)
        summary = client.post(ROUTE, json=body(conversation_id=6), headers=AUTH)
        repair = client.post(
            "/internal/counter_caches/enqueue",
            json={"requests": [{"kind": "fix_counter_caches", "organization_id": None}]},
            headers=AUTH,
        )
    finally:
        server.kill()
    assert summary.status_code == repair.status_code == 503
    assert summary.get_json()["error"] == "queue_unavailable"
