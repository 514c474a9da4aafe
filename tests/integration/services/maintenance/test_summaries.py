"""The summary enqueue route Rails' Api2ConversationSummaryEnqueuer calls (auth, 400, 202,
dedupe, 503 so Rails falls back) and the job calling Rails' summarize endpoint."""

from __future__ import annotations

from flask.testing import FlaskClient

from services.app.bootstrap import Platform
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH
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
