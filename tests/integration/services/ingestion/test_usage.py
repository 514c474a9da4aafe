"""The ingestion usage events, read back per organization: GET /usage and
``speedtier ingestion usage`` (real PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient

from services.app.bootstrap import Platform
from services.app.cli import main
from shared.db.models import UsageEvent
from tests.fixtures_platform import TOKEN
from tests.integration.services.ingestion.factories import Tenant, new_org, new_tenant

INTERNAL = {"Authorization": f"Bearer {TOKEN}"}
DAY1, DAY2 = datetime(2026, 11, 1, 9, tzinfo=UTC), datetime(2026, 11, 2, 9, tzinfo=UTC)


def add_events(platform: Platform, organization_id: int) -> None:
    ingested = "kb_document_ingested"
    with platform.sessions() as session:
        session.add_all(
            [
                UsageEvent(
                    organization_id=organization_id,
                    kind=ingested,
                    subject_id=11,
                    payload={
                        "knowledge_base_id": 5,
                        "version": 1,
                        "chunks": 4,
                        "tokens": 400,
                        "embedded": 4,
                    },
                    created_at=DAY1,
                ),
                UsageEvent(
                    organization_id=organization_id,
                    kind=ingested,
                    subject_id=11,
                    payload={
                        "knowledge_base_id": 5,
                        "version": 1,
                        "chunks": 0,
                        "embedded": 0,
                        "unchanged": True,
                    },
                    created_at=DAY2,
                ),
                UsageEvent(
                    organization_id=organization_id,
                    kind=ingested,
                    subject_id=12,
                    payload={
                        "knowledge_base_id": 6,
                        "version": 2,
                        "chunks": 2,
                        "tokens": 90,
                        "embedded": 2,
                    },
                    created_at=DAY2,
                ),
            ]
        )
        session.commit()


@pytest.fixture
def tenant(client: FlaskClient, platform: Platform) -> Tenant:
    owner = new_tenant(client, INTERNAL)
    add_events(platform, owner.organization_id)
    add_events(platform, new_org())  # another organization's, never counted
    return owner


def test_usage_totals_the_organizations_events_per_base(tenant: Tenant) -> None:
    response = tenant.call("GET", "/usage")

    assert response.status_code == 200, response.json
    body = response.json
    assert body is not None and body["since"] is None
    by_base = {row["knowledge_base_id"]: row for row in body["totals"]}
    assert by_base[5]["events"] == 2 and by_base[5]["documents"] == 1
    assert (by_base[5]["chunks"], by_base[5]["tokens"], by_base[5]["embedded"]) == (4, 400, 4)
    assert by_base[5]["unchanged"] == 1
    assert by_base[6]["chunks"] == 2 and by_base[6]["kind"] == "kb_document_ingested"


def test_usage_is_bounded_by_since_and_until(tenant: Tenant) -> None:
    response = tenant.call(
        "GET",
        "/usage",
        query_string={"since": "2026-11-02T00:00:00Z", "until": "2026-11-03T00:00:00Z"},
    )

    assert response.status_code == 200, response.json
    by_base = {row["knowledge_base_id"]: row for row in response.json["totals"]}  # type: ignore[index]
    assert by_base[5]["events"] == 1 and by_base[5]["chunks"] == 0


@pytest.mark.parametrize(
    "query", [{"since": "yesterday"}, {"since": "2026-11-02T00:00:00"}, {"other": "1"}]
)
def test_bad_usage_queries_are_refused(tenant: Tenant, query: dict[str, str]) -> None:
    assert tenant.call("GET", "/usage", query_string=query).status_code == 400


def test_usage_needs_an_api_key(client: FlaskClient) -> None:
    assert client.get("/usage").status_code == 401


def test_the_cli_summarizes_an_organizations_usage(
    platform: Platform,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    database_url: str,
    namespace: str,
) -> None:
    organization_id = new_org()
    add_events(platform, organization_id)
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
    }.items():
        monkeypatch.setenv(name, value)

    result = CliRunner().invoke(
        main,
        ["ingestion", "usage", "--organization", str(organization_id), "--since", "2026-11-02"],
    )

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"organization {organization_id}, 2026-11-02T00:00:00+00:00 to now:"
    assert lines[2].split() == ["kb_document_ingested", "5", "1", "1", "0", "0", "0", "1"]
    assert lines[3].split() == ["kb_document_ingested", "6", "1", "1", "2", "90", "2", "0"]
    empty = CliRunner().invoke(main, ["ingestion", "usage", "--organization", "1"])
    assert empty.exit_code == 0 and "no usage events" in empty.output
    bad = CliRunner().invoke(main, ["ingestion", "usage", "--organization", "1", "--since", "x"])
    assert bad.exit_code == 2 and "not an ISO 8601" in bad.output
