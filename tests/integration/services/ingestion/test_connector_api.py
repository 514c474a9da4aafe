"""The connector routes on real PostgreSQL and Redis: connections (credentials encrypted,
never answered), bindings of a base or a document, sync requests, and the 4xx answers to
bad input; versions show their cause."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient
from sqlalchemy import select

from services.app.bootstrap import Platform
from shared.credentials import CredentialBox
from shared.db.models import KbConnection
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.ingestion.factories import Tenant, new_tenant

KEY = Fernet.generate_key().decode()
TOKEN = "ya29.super-secret-drive-token"
DRIVE = {"provider": "google_drive", "name": "Drive", "credentials": {"access_token": TOKEN}}


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(connector_credentials_key=KEY)


@pytest.fixture
def tenant_factory(client: FlaskClient) -> Callable[[], Tenant]:
    return lambda: new_tenant(client, AUTH)


@pytest.fixture
def tenant(tenant_factory: Callable[[], Tenant]) -> Tenant:
    return tenant_factory()


def connect(tenant: Tenant, body: dict[str, Any] = DRIVE) -> int:
    response = tenant.call("POST", "/connections", body)
    assert response.status_code == 201, response.json
    return int(response.json["id"])  # type: ignore[index]


def stored_token(platform: Platform, connection_id: int) -> bytes:
    with platform.sessions() as session:
        return bytes(
            session.scalar(select(KbConnection.credentials).where(KbConnection.id == connection_id))
            or b""
        )


def test_credentials_are_stored_encrypted_and_never_answered(
    tenant: Tenant, platform: Platform
) -> None:
    response = tenant.call("POST", "/connections", DRIVE)
    assert response.status_code == 201
    assert TOKEN not in response.get_data(as_text=True)
    body = response.json
    assert body is not None
    assert (body["provider"], body["credential_fields"]) == ("google_drive", ["access_token"])
    assert response.headers["Location"] == f"/connections/{body['id']}"
    # At rest: a Fernet token, which opens to the credentials under the configured key
    token = stored_token(platform, body["id"])
    assert TOKEN.encode() not in token
    assert CredentialBox.from_setting(KEY).open(token) == {"access_token": TOKEN}
    # Reads answer no secret either
    for path in ("/connections", f"/connections/{body['id']}"):
        read = tenant.call("GET", path)
        assert read.status_code == 200 and TOKEN not in read.get_data(as_text=True)


def test_replacing_credentials_reseals_them(tenant: Tenant, platform: Platform) -> None:
    ident = connect(tenant)
    before = stored_token(platform, ident)
    response = tenant.call(
        "PUT", f"/connections/{ident}", {"credentials": {"access_token": "new-token"}, "name": "D2"}
    )
    assert response.status_code == 200, response.json
    assert response.json["name"] == "D2"  # type: ignore[index]
    after = stored_token(platform, ident)
    assert after != before
    assert CredentialBox.from_setting(KEY).open(after) == {"access_token": "new-token"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**DRIVE, "provider": "dropbox"}, "provider"),
        ({**DRIVE, "credentials": {"token": "x"}}, "credentials.access_token"),
        ({**DRIVE, "credentials": {}}, "credentials"),
        ({**DRIVE, "credentials": {"access_token": 5}}, "credentials.access_token"),
        ({**DRIVE, "credentials": {"access_token": "a\u0000b"}}, "credentials.access_token"),
        ({**DRIVE, "settings": {"site": "x"}}, "settings.site"),
        (
            {
                "provider": "zendesk",
                "name": "Z",
                "credentials": {"email": "a@b.c", "api_token": "t"},
                "settings": {"subdomain": "evil.test/"},
            },
            "settings.subdomain",
        ),
        (
            {
                "provider": "confluence",
                "name": "C",
                "credentials": {"email": "a@b.c", "api_token": "t"},
            },
            "settings.site",
        ),
        ({k: v for k, v in DRIVE.items() if k != "name"}, "name"),
        ({**DRIVE, "extra": 1}, "extra"),
    ],
)
def test_bad_connections_are_400_naming_the_field(
    tenant: Tenant, platform: Platform, body: dict[str, Any], field: str
) -> None:
    response = tenant.call("POST", "/connections", body)
    assert response.status_code == 400, response.json
    assert field in response.json["fields"]  # type: ignore[index]
    assert tenant.call("GET", "/connections").json["connections"] == []  # type: ignore[index]


@pytest.mark.parametrize("site", ["169.254.169.254", "10.0.0.1", "192.168.1.1", "127.0.0.2"])
def test_a_site_at_a_refused_address_is_400_naming_the_field(
    tenant: Tenant, platform: Platform, site: str
) -> None:
    body = {
        "provider": "confluence",
        "name": "C",
        "credentials": {"email": "a@b.c", "api_token": "t"},
        "settings": {"site": "acme"},
    }
    created = tenant.call("POST", "/connections", body)
    assert created.status_code == 201, created.json

    refused = tenant.call("POST", "/connections", {**body, "name": "D", "settings": {"site": site}})
    replaced = tenant.call(
        "PUT",
        f"/connections/{created.json['id']}",
        {"settings": {"site": site}},  # type: ignore[index]
    )

    for response in (refused, replaced):
        assert response.status_code == 400, response.json
        assert response.json["fields"]["settings.site"].startswith("refused: address")  # type: ignore[index]


def test_a_taken_name_and_a_connection_in_use_are_409(tenant: Tenant) -> None:
    ident = connect(tenant)
    assert tenant.call("POST", "/connections", DRIVE).status_code == 409
    base = tenant.create_base()
    bound = tenant.call("POST", f"/knowledge-bases/{base}/connectors", {"connection_id": ident})
    assert bound.status_code == 201
    assert tenant.call("DELETE", f"/connections/{ident}").status_code == 409
    binding = bound.json["id"]  # type: ignore[index]
    assert tenant.call("DELETE", f"/knowledge-bases/{base}/connectors/{binding}").status_code == 204
    assert tenant.call("DELETE", f"/connections/{ident}").status_code == 204
    assert tenant.call("GET", f"/connections/{ident}").status_code == 404


def test_another_organizations_connection_is_missing(
    tenant: Tenant, tenant_factory: Callable[[], Tenant]
) -> None:
    ident = connect(tenant)
    other = tenant_factory()
    assert other.call("GET", f"/connections/{ident}").status_code == 404
    assert other.call("PUT", f"/connections/{ident}", {"name": "x"}).status_code == 404
    assert other.call("DELETE", f"/connections/{ident}").status_code == 404
    base = other.create_base()
    response = other.call("POST", f"/knowledge-bases/{base}/connectors", {"connection_id": ident})
    assert response.status_code == 404


def test_without_a_key_credentials_are_refused_with_503(
    make_platform: MakePlatform, client: FlaskClient
) -> None:
    from services.app.api import create_app

    keyless = create_app(make_platform(connector_credentials_key=None)).test_client()
    tenant = new_tenant(keyless, AUTH)
    response = tenant.call("POST", "/connections", DRIVE)
    assert response.status_code == 503
    assert response.json["error"] == "credentials_key_missing"  # type: ignore[index]
    assert "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY" in response.json["message"]  # type: ignore[index]


def test_binding_a_base_enqueues_its_sync(tenant: Tenant, platform: Platform) -> None:
    ident = connect(tenant)
    base = tenant.create_base()
    response = tenant.call(
        "POST",
        f"/knowledge-bases/{base}/connectors",
        {
            "connection_id": ident,
            "settings": {"drive_id": "0AbCshared", "export_format": "html"},
            "audience": ["staff"],
        },
    )
    assert response.status_code == 201, response.json
    binding = response.json
    assert binding is not None
    assert binding["settings"] == {"drive_id": "0AbCshared", "export_format": "html"}
    assert (binding["provider"], binding["audience"]) == ("google_drive", ["staff"])
    assert binding["job_id"] == f"kb-connector-sync-{binding['id']}" and binding["enqueued"]
    record = platform.broker.jobs.record(binding["job_id"])
    assert record is not None and record["queue"] == "kb_connector_sync.slow"
    # A sync request while it waits is the same job
    path = f"/knowledge-bases/{base}/connectors/{binding['id']}"
    again = tenant.call("POST", f"{path}/sync", {"full": True})
    assert again.status_code == 202 and again.json["job_id"] == binding["job_id"]  # type: ignore[index]
    assert tenant.client.post(f"{path}/sync", headers=tenant.auth).status_code == 202  # empty body
    listed = tenant.call("GET", f"/knowledge-bases/{base}/connectors").json
    assert [b["id"] for b in listed["bindings"]] == [binding["id"]]  # type: ignore[index]
    assert tenant.call("GET", path).json["next_sync_at"] is not None  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        # what the connection's provider (Google Drive) does not take: a conflict with it
        ({"settings": {"drive_id": "a/b"}}, "settings.drive_id", 409),
        ({"settings": {"export_format": "pdf"}}, "settings.export_format", 409),
        ({"settings": {"folder": "x"}}, "settings.folder", 409),
        ({"item_id": "no-slash"}, "item_id", 409),
        # what the document refuses
        ({"connection_id": "1"}, "connection_id", 400),
        ({"sync": "yes"}, "sync", 400),
    ],
)
def test_bad_bindings_are_refused_naming_the_field(
    tenant: Tenant, body: dict[str, Any], field: str, status: int
) -> None:
    ident = connect(tenant)
    base = tenant.create_base()
    response = tenant.call(
        "POST", f"/knowledge-bases/{base}/connectors", {"connection_id": ident, **body}
    )
    assert response.status_code == status, response.json
    assert field in response.json["fields"]  # type: ignore[index]
    assert tenant.call("GET", f"/knowledge-bases/{base}/connectors").json["bindings"] == []  # type: ignore[index]


EMAIL_TOKEN = {"email": "a@b.c", "api_token": "t"}


@pytest.mark.parametrize(
    ("connection", "settings", "field"),
    [
        (("notion", {"api_token": "x"}, {}), {"root_page_ids": ["a\u0000"]}, "root_page_ids[0]"),
        (
            ("confluence", EMAIL_TOKEN, {"site": "acme"}),
            {"space_keys": ["\u0000"]},
            "space_keys[0]",
        ),
        (("zendesk", EMAIL_TOKEN, {"subdomain": "acme"}), {"locales": ["e\u0000n"]}, "locales[0]"),
        (
            ("zendesk", EMAIL_TOKEN, {"subdomain": "acme"}),
            {"brand_ids": ["1\u0000"]},
            "brand_ids[0]",
        ),
        (("sharepoint", {"access_token": "t"}, {}), {"site_id": "a\u0000"}, "site_id"),
        (("sharepoint", {"access_token": "t"}, {}), {"drive_id": "a\u0000"}, "drive_id"),
    ],
)
def test_a_nul_in_a_bindings_settings_is_400_naming_the_field(
    tenant: Tenant,
    connection: tuple[str, dict[str, str], dict[str, str]],
    settings: dict[str, Any],
    field: str,
) -> None:
    provider, credentials, connection_settings = connection
    ident = connect(
        tenant,
        {
            "provider": provider,
            "name": provider,
            "credentials": credentials,
            "settings": connection_settings,
        },
    )
    base = tenant.create_base()
    path = f"/knowledge-bases/{base}/connectors"
    response = tenant.call("POST", path, {"connection_id": ident, "settings": settings})
    assert response.status_code == 400, response.json
    assert f"settings.{field}" in response.json["fields"]  # type: ignore[index]
    assert tenant.call("GET", path).json["bindings"] == []  # type: ignore[index]


def test_sharepoint_needs_a_site_or_a_drive(tenant: Tenant) -> None:
    ident = connect(
        tenant, {"provider": "sharepoint", "name": "SP", "credentials": {"access_token": "t"}}
    )
    base = tenant.create_base()
    path = f"/knowledge-bases/{base}/connectors"
    missing = tenant.call("POST", path, {"connection_id": ident, "settings": {}})
    # no scope is a SharePoint binding's conflict with its connection's provider
    assert missing.status_code == 409 and "settings" in missing.json["fields"]  # type: ignore[index]
    ok = tenant.call("POST", path, {"connection_id": ident, "settings": {"site_id": "contoso,1,2"}})
    assert ok.status_code == 201


def test_binding_a_document_to_one_item(tenant: Tenant) -> None:
    ident = connect(
        tenant, {"provider": "notion", "name": "N", "credentials": {"api_token": "secret_x"}}
    )
    base = tenant.create_base()
    added = tenant.add_text(base, "Runbook", "Old text.")
    document = added.json["id"]  # type: ignore[index]
    path = f"/knowledge-bases/{base}/documents/{document}/connector"
    bad = tenant.call("PUT", path, {"connection_id": ident, "item_id": "not a page"})
    assert bad.status_code == 409 and "item_id" in bad.json["fields"]  # type: ignore[index]
    page = "59833787-2cf9-4fdf-8782-e53db20768a5"
    response = tenant.call("PUT", path, {"connection_id": ident, "item_id": page, "sync": False})
    assert response.status_code == 201, response.json
    body = response.json
    assert body is not None
    assert (body["item_id"], body["document_id"], body["enqueued"], body["job_id"]) == (
        page,
        document,
        False,
        None,
    )
    missing = f"/knowledge-bases/{base}/documents/{document + 10**9}/connector"
    assert tenant.call("PUT", missing, {"connection_id": ident, "item_id": page}).status_code == 404


def test_versions_show_their_cause(tenant: Tenant, platform: Platform) -> None:
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import HashingEmbedder
    from services.ingestion import ingestion_job
    from shared.db.base import utcnow

    base = tenant.create_base()
    document = tenant.add_text(base, "Note", "Some text.").json["id"]  # type: ignore[index]
    ingestion_job.run_ingestion(
        platform.sessions,
        organization_id=tenant.organization_id,
        document_id=document,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        final_attempt=True,
        now=utcnow(),
    )
    response = tenant.call("GET", f"/knowledge-bases/{base}/documents/{document}/versions")
    assert response.status_code == 200
    assert [(v["version"], v["cause"]) for v in response.json["versions"]] == [(1, "upload")]  # type: ignore[index]


def test_the_openapi_document_describes_the_connector_schemas(client: FlaskClient) -> None:
    document = client.get("/internal/openapi.json", headers=AUTH).json
    assert document is not None
    schemas = document["components"]["schemas"]
    assert "cause" in schemas["VersionOut"]["properties"]
    assert "credentials" not in schemas["ConnectionOut"]["properties"]
    assert set(schemas["ConnectionCreate"]["properties"]["provider"]["enum"]) == {
        "notion",
        "confluence",
        "google_drive",
        "sharepoint",
        "zendesk",
    }
    create = document["paths"]["/connections"]["post"]
    assert {"201", "400", "401", "409", "503"} <= set(create["responses"])
    assert json.dumps(create).count("apiKeyAuth") >= 1
