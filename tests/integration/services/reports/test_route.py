"""``POST /internal/daily_agent_evaluation_reports/enqueue``: auth, 400, 202, dedupe."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from tests.fixtures_platform import AUTH

PATH = "/internal/daily_agent_evaluation_reports/enqueue"


def _body(**params: Any) -> dict[str, Any]:
    request = {
        "kind": "daily_agent_evaluation_report",
        "organization_id": 7,
        "date": "2026-11-30",
        "send_email": True,
        "queue_backfill": False,
        "source": "admin",
    }
    request.update(params)
    return {"requests": [request]}


def test_without_the_token_it_is_401(client: FlaskClient) -> None:
    assert client.post(PATH, json=_body()).status_code == 401


def test_an_admin_report_is_accepted_then_deduplicated(client: FlaskClient) -> None:
    first = client.post(PATH, json=_body(), headers=AUTH)
    assert first.status_code == 202
    job = first.get_json()["jobs"][0]
    assert job["job_id"] == "daily-agent-eval-report-7-2026-11-30-email-no-bf"
    assert job["outcome"] == "added"
    again = client.post(PATH, json=_body(), headers=AUTH)
    assert again.status_code == 202 and again.get_json()["jobs"][0]["outcome"] == "deduplicated"


def test_bad_requests_are_400_naming_the_field(client: FlaskClient) -> None:
    for params, field in (
        ({"date": "yesterday"}, "requests[0].date"),
        ({"date": "2026-02-30"}, "requests[0].date"),
        ({"source": "cron"}, "requests[0].source"),
        ({"source": "nobody"}, "requests[0].source"),
        ({"organization_id": 0}, "requests[0].organization_id"),
    ):
        answer = client.post(PATH, json=_body(**params), headers=AUTH)
        assert answer.status_code == 400, (params, answer.get_json())
        assert field in str(answer.get_json()), (params, answer.get_json())
    missing_source = _body()
    del missing_source["requests"][0]["source"]
    answer = client.post(PATH, json=missing_source, headers=AUTH)
    assert answer.status_code == 400 and "requests[0].source" in str(answer.get_json())
