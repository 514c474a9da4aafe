"""The API's input rules against real PostgreSQL and Redis: NUL in any string field is a 400
naming it; a streamed (chunked) body over the limit is a 413; authentication comes before
routing and a path id is an integer from 1 (else 404); the OpenAPI document and the
validators agree on numbers, nulls and lengths; PostgreSQL down is a 503 with Retry-After."""

from __future__ import annotations

import io
import json
import re
import socket
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select
from werkzeug.test import TestResponse

from services.app.api import create_app
from services.app.bootstrap import Platform
from services.ingestion.routes import UPLOAD_BODY_LIMIT
from shared.db.models import IngestionApiKey, KbDocument, KnowledgeBase
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import Tenant, new_org, new_tenant

TOKEN = "internal-secret"
INTERNAL = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 16 * 1024
MAX_ID = 2**63 - 1
NUL_MESSAGE = "must not contain NUL (U+0000)"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(internal_api_token=TOKEN, api_max_body_bytes=MAX_BODY)


@pytest.fixture
def tenant(client: FlaskClient) -> Tenant:
    return new_tenant(client, INTERNAL)


def stored(platform: Platform, organization_id: int) -> tuple[int, int, int]:
    """(knowledge bases, documents, API keys) of the organization, deleted ones included."""
    with platform.sessions() as session:
        return tuple(  # type: ignore[return-value]
            int(session.scalar(select(func.count()).where(m.organization_id == organization_id)))
            for m in (KnowledgeBase, KbDocument, IngestionApiKey)
        )


def queued(platform: Platform) -> int:
    """Keys in this test's Redis namespace: none until a job is accepted."""
    client = platform.broker.client
    return sum(1 for _ in client.scan_iter(match=f"{platform.settings.redis_namespace}:*"))


def assert_refused(response: TestResponse, field: str, message: str) -> None:
    assert response.status_code == 400, (field, response.status_code, response.json)
    body = response.json
    assert body is not None and body["error"] == "invalid_request"
    assert message in body["fields"].get(field, ""), (field, body)


# -- 1. NUL in any string field -----------------------------------------------------------

NUL = "a\x00b"


def test_a_nul_in_any_json_string_field_is_a_400_naming_it(
    tenant: Tenant, client: FlaskClient, platform: Platform
) -> None:
    base = tenant.create_base()
    documents = f"/knowledge-bases/{base}/documents"
    url = {"url": "https://example.com/"}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/knowledge-bases", {"name": NUL}, "name"),
        (documents, {"name": NUL, "text": "words"}, "name"),
        (documents, {"name": "doc", "text": NUL}, "text"),
        (documents, {"name": "doc", "text": "words", "audience": ["staff", NUL]}, "audience[1]"),
        (documents, {"url": "https://example.com/a\x00"}, "url"),
        (documents, {**url, "connector": NUL}, "connector"),
        (documents, {**url, "name": NUL}, "name"),
        ("/search", {"query": NUL}, "query"),
        ("/search", {"query": "refunds", "audience": [NUL]}, "audience[0]"),
        (f"/knowledge-bases/{base}/search", {"query": NUL}, "query"),
    ]
    for path, body, field in cases:
        assert_refused(tenant.call("POST", path, body), field, NUL_MESSAGE)

    key = {"organization_id": tenant.organization_id, "name": NUL}
    refused_key = client.post("/internal/ingestion/api_keys", json=key, headers=INTERNAL)
    assert_refused(refused_key, "name", NUL_MESSAGE)
    for path, item, field in (
        ("/internal/jobs/enqueue", {"kind": "tick:kb-sync", "slot": NUL}, "slot"),
        (
            "/internal/knowledge_base_sync/enqueue",
            {"kind": "sync_document", "organization_id": 7, "document_id": 1, "provider": NUL},
            "provider",
        ),
    ):
        body = {"requests": [{"organization_id": None, **item}]}
        response = client.post(path, json=body, headers=INTERNAL)
        assert_refused(response, f"requests[0].{field}", NUL_MESSAGE)

    assert stored(platform, tenant.organization_id) == (1, 0, 1)
    assert queued(platform) == 0


def test_a_nul_in_any_part_of_a_multipart_upload_is_a_400_naming_it(
    tenant: Tenant, platform: Platform
) -> None:
    path = f"/knowledge-bases/{tenant.create_base()}/documents"

    def upload(filename: str, content_type: str = "text/plain", **form: Any) -> TestResponse:
        data = {"file": (io.BytesIO(b"some words"), filename, content_type), **form}
        return tenant.client.post(
            path, data=data, headers=tenant.auth, content_type="multipart/form-data"
        )

    assert_refused(upload("a.txt", name=NUL), "name", NUL_MESSAGE)
    assert_refused(upload("a.txt", audience=f"staff,{NUL}"), "audience[1]", NUL_MESSAGE)
    assert_refused(upload("a\x00.txt"), "file.filename", NUL_MESSAGE)
    assert_refused(upload("a.txt", "text/plain; x=\x00"), "file.content_type", NUL_MESSAGE)
    assert stored(platform, tenant.organization_id) == (1, 0, 1)

    accepted = upload("a.txt", name="  notes ", audience="staff, sales")
    assert accepted.status_code == 202, accepted.json
    assert accepted.json is not None
    assert accepted.json["name"] == "notes"
    assert sorted(accepted.json["audience"]) == ["sales", "staff"]


# -- 2. bodies of unknown length ----------------------------------------------------------


def chunked(client: FlaskClient, path: str, body: bytes, headers: dict[str, str]) -> TestResponse:
    """POST ``body`` with ``Transfer-Encoding: chunked`` and no Content-Length, the stream
    terminated by the server (``wsgi.input_terminated``), as gunicorn hands it over."""
    return client.post(
        path,
        input_stream=io.BytesIO(body),
        headers={**headers, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )


def test_a_chunked_body_over_the_limit_is_a_413_not_a_truncated_body(
    tenant: Tenant, client: FlaskClient, platform: Platform
) -> None:
    padded = json.dumps({"name": "Docs"}).encode() + b" " * (2 * MAX_BODY)
    over = chunked(client, "/knowledge-bases", padded, tenant.auth)
    assert over.status_code == 413, over.json
    assert over.json == {
        "error": "payload_too_large",
        "message": f"the body is over {MAX_BODY} bytes",
        "limit_bytes": MAX_BODY,
    }
    cut = json.dumps({"name": "x" * (2 * MAX_BODY)}).encode()
    assert chunked(client, "/knowledge-bases", cut, tenant.auth).status_code == 413

    tick = {"kind": "tick:kb-sync", "organization_id": None, "slot": "chunked"}
    batch = json.dumps({"requests": [tick]}).encode()
    padded_batch = batch + b"\n" * MAX_BODY
    assert chunked(client, "/internal/jobs/enqueue", padded_batch, INTERNAL).status_code == 413
    assert stored(platform, tenant.organization_id) == (0, 0, 1)
    assert queued(platform) == 0

    # At the limit exactly, or under it, a streamed body is read whole.
    exact = json.dumps({"name": "Docs"}).encode().ljust(MAX_BODY)
    assert chunked(client, "/knowledge-bases", exact, tenant.auth).status_code == 201
    assert chunked(client, "/internal/jobs/enqueue", batch, INTERNAL).status_code == 202


def test_the_upload_route_holds_a_chunked_body_to_its_own_limit(tenant: Tenant) -> None:
    path = f"/knowledge-bases/{tenant.create_base()}/documents"
    text = json.dumps({"name": "big", "text": "word "}).encode()

    over = chunked(tenant.client, path, text + b" " * UPLOAD_BODY_LIMIT, tenant.auth)
    under = chunked(tenant.client, path, text + b" " * (2 * MAX_BODY), tenant.auth)

    assert over.status_code == 413
    assert over.json is not None and over.json["limit_bytes"] == UPLOAD_BODY_LIMIT
    assert under.status_code == 202, under.json


# -- 3. authentication first; path ids ----------------------------------------------------

TEMPLATES: list[tuple[str, str]] = [
    ("GET", "/knowledge-bases/{id}"),
    ("DELETE", "/knowledge-bases/{id}"),
    ("GET", "/knowledge-bases/{id}/documents"),
    ("POST", "/knowledge-bases/{id}/documents"),
    ("POST", "/knowledge-bases/{id}/search"),
    ("GET", "/knowledge-bases/1/documents/{id}"),
    ("DELETE", "/knowledge-bases/1/documents/{id}"),
    ("POST", "/knowledge-bases/1/documents/{id}/retry"),
    ("GET", "/knowledge-bases/1/documents/{id}/versions"),
    ("GET", "/knowledge-bases/{id}/documents/1/versions/diff?from=1&to=2"),
    ("POST", "/knowledge-bases/{id}/documents/1/rollback"),
]
NOT_IDS = ["0", "-1", "abc", "1.5", "01", str(MAX_ID + 1), "%20"]


def test_without_a_key_every_public_path_answers_401_before_routing(
    client: FlaskClient,
) -> None:
    paths = [(m, t.format(id=i)) for m, t in TEMPLATES for i in [*NOT_IDS, "1"]]
    paths += [
        ("PUT", "/knowledge-bases/1"),  # no such method
        ("GET", "/knowledge-bases/1/nothing"),  # no such route
        ("PATCH", "/search"),
        ("GET", "/knowledge-bases"),
    ]
    for method, path in paths:
        response = client.open(path, method=method)
        assert response.status_code == 401, (method, path, response.json)
        assert response.json == {"error": "unauthorized", "message": "missing API key"}


def test_a_path_id_that_is_not_an_id_answers_404_on_every_method(tenant: Tenant) -> None:
    for method, template in TEMPLATES:
        for not_an_id in NOT_IDS:
            response = tenant.call(method, template.format(id=not_an_id))
            assert response.status_code == 404, (method, template, not_an_id, response.json)
            assert response.json is not None and response.json["error"] == "not_found"
            assert "is not an id (an integer from 1 to" in response.json["message"]
        if method != "POST" or template.endswith("/retry"):  # the others need a body first
            missing = tenant.call(method, template.format(id=MAX_ID))
            assert missing.status_code == 404, (method, template, missing.json)
    assert tenant.call("PUT", "/knowledge-bases/1").status_code == 405


#: Path parameters that are not ids: a job id, and a webhook's source and path (an unknown
#: one answers 404).
STRING_PATH_PARAMETERS = {"job_id", "source", "path"}


def test_path_ids_are_documented_as_the_routes_read_them(client: FlaskClient) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None

    for path, operations in document["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in STRING_PATH_PARAMETERS:
                    assert parameter["schema"]["type"] == "string", (path, parameter)
                elif parameter["in"] == "path":
                    assert parameter["schema"] == {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_ID,
                    }, (path, parameter)
                    assert "404" in operation["responses"], path
    job = document["paths"]["/internal/jobs/{job_id}"]["get"]["parameters"]
    assert job[0]["schema"] == {"type": "string", "minLength": 1, "not": {"const": "enqueue"}}


# -- 4. the document and the validators agree ---------------------------------------------


def test_a_number_is_not_a_date_time(tenant: Tenant) -> None:
    # `format: date-time` in the document: 0.5 is not read as half a second after 1970
    for bad in ("0.5", "1700000000", "2026-12-01"):
        assert_refused(tenant.call("GET", f"/usage?until={bad}"), "until", "ISO 8601")
    assert tenant.call("GET", "/usage?until=2026-12-01T00:00:00Z").status_code == 200


def test_the_enqueue_path_allows_only_its_post(client: FlaskClient) -> None:
    answer = client.options("/internal/jobs/enqueue", headers=INTERNAL)
    assert set(answer.headers["Allow"].replace(" ", "").split(",")) == {"POST", "OPTIONS"}
    assert client.get("/internal/jobs/enqueue", headers=INTERNAL).status_code == 405
    assert client.get("/internal/jobs/no-such-job", headers=INTERNAL).status_code == 404


def test_the_reports_route_documents_the_sources_it_takes(client: FlaskClient) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    # the reports route's own request schema names Rails' two sources (the ticks' cron is
    # taken by /internal/jobs/enqueue only)
    assert '"enum": ["admin", "backfill"]' in json.dumps(document["components"]["schemas"])
    body = {"kind": "daily_agent_evaluation_report", "organization_id": 1, "date": "2026-12-01"}
    answer = client.post(
        "/internal/daily_agent_evaluation_reports/enqueue",
        json={"requests": [{**body, "source": "cron"}]},
        headers=INTERNAL,
    )
    assert_refused(answer, "requests[0].source", "'admin' or 'backfill'")


def test_a_whole_number_is_an_integer_and_a_string_never_is(
    tenant: Tenant, client: FlaskClient
) -> None:
    base = tenant.create_base()
    assert tenant.call("POST", "/search", {"query": "refunds", "top_k": 5.0}).status_code == 200
    for top_k in (5.5, "5", True):
        response = tenant.call("POST", "/search", {"query": "refunds", "top_k": top_k})
        assert_refused(response, "top_k", "valid integer")
    url = {"url": "https://example.com/", "crawl_depth": 1.0}
    added = tenant.call("POST", f"/knowledge-bases/{base}/documents", url)
    assert added.status_code == 202 and added.json is not None
    assert added.json["crawl_depth"] == 1

    def enqueue(item: dict[str, Any]) -> TestResponse:
        return client.post("/internal/jobs/enqueue", json={"requests": [item]}, headers=INTERNAL)

    document = {"kind": "sync_document_chunks", "organization_id": 7, "document_id": 42}
    as_float = enqueue({**document, "document_id": 42.0, "organization_id": 7.0})
    assert as_float.status_code == 202, as_float.json
    assert as_float.json is not None
    assert as_float.json["jobs"][0]["job_id"] == "kb-document-chunks-42"
    assert_refused(enqueue({**document, "document_id": "42"}), "requests[0].document_id", "valid")
    assert_refused(enqueue({**document, "organization_id": "7"}), "requests[0].organization_id", "")
    key = {"organization_id": float(new_org()), "name": "float"}
    assert (
        client.post("/internal/ingestion/api_keys", json=key, headers=INTERNAL).status_code == 201
    )


def test_organization_id_is_null_exactly_where_the_document_says_so(
    client: FlaskClient,
) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    schemas = document["components"]["schemas"]

    def enqueue(item: dict[str, Any]) -> int:
        body = {"requests": [item]}
        return client.post("/internal/jobs/enqueue", json=body, headers=INTERNAL).status_code

    tick = {"kind": "tick:kb-sync", "slot": "nulls"}
    sync = {"kind": "sync_source", "source_id": 3}
    assert schemas["TickKbSyncRequest"]["properties"]["organization_id"]["type"] == "null"
    assert enqueue({**tick, "organization_id": None}) == 202
    assert enqueue({**tick, "organization_id": 1}) == 400
    assert schemas["SyncSourceRequest"]["properties"]["organization_id"]["type"] == "integer"
    assert enqueue({**sync, "organization_id": None}) == 400
    assert enqueue({**sync, "organization_id": 1}) == 202
    assert schemas["ApiKeyCreate"]["properties"]["organization_id"]["type"] == "integer"
    key = {"organization_id": None, "name": "x"}
    refused = client.post("/internal/ingestion/api_keys", json=key, headers=INTERNAL)
    assert_refused(refused, "organization_id", "valid integer")
    # A query string cannot say null: an optional query parameter is documented as optional.
    lookup = document["paths"]["/internal/jobs/{job_id}"]["get"]["parameters"]
    organization = next(p for p in lookup if p["name"] == "organization_id")
    assert organization["required"] is False
    assert organization["schema"]["type"] == "integer" and "anyOf" not in organization["schema"]


def test_lengths_count_a_string_as_sent_then_it_is_trimmed(
    tenant: Tenant, platform: Platform
) -> None:
    schema = tenant.client.get("/internal/openapi.json", headers=INTERNAL).json
    assert schema is not None
    name = schema["components"]["schemas"]["KnowledgeBaseCreate"]["properties"]["name"]
    assert (name["minLength"], name["maxLength"]) == (1, 255)

    padded = " " * 10 + "x" * 250  # 260 characters as sent, 250 once trimmed
    assert_refused(tenant.call("POST", "/knowledge-bases", {"name": padded}), "name", "255")
    assert_refused(tenant.call("POST", "/knowledge-bases", {"name": " \t "}), "name", "blank")
    created = tenant.call("POST", "/knowledge-bases", {"name": "  Help center  "})
    assert created.status_code == 201
    assert created.json is not None and created.json["name"] == "Help center"
    assert stored(platform, tenant.organization_id)[0] == 1


def test_every_documented_request_schema_states_the_rules_the_validators_apply(
    client: FlaskClient,
) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    schemas = document["components"]["schemas"]
    seen: set[str] = set()

    def walk(schema: Any, where: str) -> None:
        if isinstance(schema, list):
            for index, item in enumerate(schema):
                walk(item, f"{where}[{index}]")
            return
        if not isinstance(schema, dict):
            return
        reference = schema.get("$ref")
        if reference is not None and reference not in seen:
            seen.add(reference)
            walk(schemas[reference.rsplit("/", 1)[1]], reference)
        assert not {"ge", "gt", "le", "lt"} & set(schema), where  # pydantic's, not JSON Schema's
        if schema.get("type") == "string" and "const" not in schema and "enum" not in schema:
            # A URI, a date or a file is parsed as such (NUL makes it invalid: 400).
            free_text = schema.get("format") not in ("uri", "binary", "date", "date-time")
            pattern = schema.get("pattern", "")
            # NUL refused outright, or only listed characters allowed (a host name's, a
            # URL's): no wildcard, and every negated class names NUL
            bare = re.sub(r"\\.|\[(?:\\.|[^\]])*\]", "", pattern)
            negated = re.findall(r"\[\^((?:\\.|[^\]])*)\]", pattern)
            listed = pattern.startswith("^") and "." not in bare
            listed = listed and all("\\x00" in cls for cls in negated)
            assert not free_text or pattern.startswith("^[^\\x00]*") or listed, where
        for key, value in schema.items():
            if key not in ("$ref", "discriminator"):
                walk(value, f"{where}.{key}")

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                walk(media["schema"], f"{method} {path}")
    assert {"#/components/schemas/DocumentJsonCreate", "#/components/schemas/EnqueueBody"} <= seen


# -- 6. what JSON Schema cannot say, answered so that the document holds ---------------------

COMPLETIONS = "/internal/provider_conversation_sync_completions/enqueue"


def assert_conflict(response: TestResponse, field: str) -> None:
    assert response.status_code == 409, (field, response.status_code, response.json)
    body = response.json
    assert body is not None and body["error"] == "conflicting_fields"
    assert field in body["fields"], body


def responses_of(client: FlaskClient, method: str, path: str) -> dict[str, Any]:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    return document["paths"][path][method]["responses"]  # type: ignore[no-any-return]


def test_a_sync_run_id_of_another_upload_is_a_documented_409(
    client: FlaskClient, platform: Platform
) -> None:
    item = {
        "kind": "complete_provider_conversation_sync",
        "organization_id": 7,
        "conversation_upload_id": 1,
        "conversation_id": 1,
        "sync_run_id": "xcally-upload-2",
    }
    for path in (COMPLETIONS, "/internal/jobs/enqueue"):
        response = client.post(path, json={"requests": [item]}, headers=INTERNAL)
        assert_conflict(response, "requests[0].sync_run_id")
        assert "409" in responses_of(client, "post", path)
        # not of the pinned form at all: a 400, as the document's pattern says
        wrong = client.post(
            path, json={"requests": [{**item, "sync_run_id": "run-1"}]}, headers=INTERNAL
        )
        assert_refused(wrong, "requests[0].sync_run_id", "should match pattern")
    assert queued(platform) == 0


def test_a_body_that_does_not_fit_the_stored_connections_provider_is_a_documented_409(
    tenant: Tenant, client: FlaskClient
) -> None:
    created = tenant.call(
        "POST",
        "/connections",
        {"provider": "notion", "name": "wiki", "credentials": {"api_token": "secret-token"}},
    )
    assert created.status_code == 201, created.json
    connection = created.json["id"]  # type: ignore[index]
    base = tenant.create_base()
    document = tenant.call(
        "POST", f"/knowledge-bases/{base}/documents", {"name": "n", "text": "words"}
    ).json["id"]  # type: ignore[index]
    # Confluence's credentials and settings, Confluence's scope, a Confluence page id
    update, bind = "/connections/{connection_id}", "/knowledge-bases/{knowledge_base_id}/connectors"
    bind_document = "/knowledge-bases/{knowledge_base_id}/documents/{document_id}/connector"
    cases = [
        ("PUT", update, {"credentials": {"email": "a@b.c"}}, "credentials"),
        ("PUT", update, {"settings": {"site": "acme"}}, "settings.site"),
        (
            "POST",
            bind,
            {"connection_id": connection, "settings": {"space_keys": ["ENG"]}},
            "settings.space_keys",
        ),
        ("PUT", bind_document, {"connection_id": connection, "item_id": "12345"}, "item_id"),
    ]
    for method, documented, body, field in cases:
        path = documented.format(
            connection_id=connection, knowledge_base_id=base, document_id=document
        )
        response = tenant.call(method, path, body)
        assert response.status_code == 409, (path, response.json)
        assert response.json["error"] == "conflicting_fields"  # type: ignore[index]
        assert any(name.startswith(field) for name in response.json["fields"]), response.json  # type: ignore[index]
        assert "notion" in json.dumps(response.json["fields"])  # type: ignore[index]
        assert "409" in responses_of(client, method.lower(), documented), documented
    # A key that is no field name fits no provider: the document's propertyNames say so
    schemas = client.get("/internal/openapi.json", headers=INTERNAL).json["components"]["schemas"]  # type: ignore[index]
    names = schemas["ConnectionUpdate"]["properties"]["credentials"]["anyOf"][0]["propertyNames"]
    assert re.fullmatch(names["pattern"], "api_token") and not re.fullmatch(names["pattern"], "0")
    refused = tenant.call("PUT", f"/connections/{connection}", {"credentials": {"0": "x"}})
    assert refused.status_code == 400, refused.json
    # What fits the stored provider is taken
    fitting = tenant.call(
        "PUT", f"/connections/{connection}", {"credentials": {"api_token": "rotated-token"}}
    )
    assert fitting.status_code == 200, fitting.json


def test_a_url_is_the_documents_pattern_and_its_normal_form_never_grows(
    tenant: Tenant, client: FlaskClient
) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    schemas = document["components"]["schemas"]
    crawl = schemas["CrawlUrlRequest"]["properties"]["url"]
    assert crawl["maxLength"] == 2083 and crawl["pattern"].startswith("^[Hh][Tt][Tt][Pp]")
    pattern = re.compile(crawl["pattern"])
    # A bare host at the limit: WHATWG's normal form adds a "/" (2084), still accepted
    host = (("a" * 62 + ".") * 34)[: 2083 - len("https://") - 1] + "b"
    longest = f"https://{host}"
    assert len(longest) == 2083 and pattern.fullmatch(longest)
    crawl_item = {"kind": "crawl_url", "organization_id": 7, "crawl_task_id": 1}
    for url, status in (
        (longest, 202),
        ("https://xn--mnchen-3ya.de/a?b=c#d", 202),
        ("HTTPS://Example.COM:443", 202),
        ("https://münchen.de/", 400),  # an IDN in its xn-- form only
        ("https://example.com?q=1", 400),  # a path from "/" before a query
        ("https://example.com/a b", 400),
        ("https://a.0/", 400),  # WHATWG reads the host as an IPv4 address, and refuses it
        ("ftp://example.com/", 400),
    ):
        assert bool(pattern.fullmatch(url)) == (status == 202), url
        body = {"requests": [{**crawl_item, "url": url, "parent_url": url}]}
        response = client.post("/internal/knowledge_base_sync/enqueue", json=body, headers=INTERNAL)
        assert response.status_code == status, (url, response.json)
    # A URL document takes the same rule
    base = tenant.create_base()
    documents = f"/knowledge-bases/{base}/documents"
    assert tenant.call("POST", documents, {"url": "https://münchen.de/"}).status_code == 400
    accepted = tenant.call("POST", documents, {"url": "https://example.com"})
    assert accepted.status_code == 202, accepted.json


def test_the_multipart_audience_is_documented_as_the_text_it_is_on_the_wire(
    tenant: Tenant, client: FlaskClient
) -> None:
    operation = client.get("/internal/openapi.json", headers=INTERNAL).json["paths"][  # type: ignore[index]
        "/knowledge-bases/{knowledge_base_id}/documents"
    ]["post"]
    reference = operation["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
    form = client.get("/internal/openapi.json", headers=INTERNAL).json["components"]["schemas"][  # type: ignore[index]
        reference.rsplit("/", 1)[1]
    ]
    text, parts = form["properties"]["audience"]["anyOf"]
    assert text["type"] == "string" and parts["type"] == "array"
    path = f"/knowledge-bases/{tenant.create_base()}/documents"

    def upload(audience: Any) -> TestResponse:
        data = {"file": (io.BytesIO(b"some words"), "a.txt", "text/plain"), "audience": audience}
        return tenant.client.post(
            path, data=data, headers=tenant.auth, content_type="multipart/form-data"
        )

    for audience in ("{}", "staff, sales", ["staff", "sales"], "true"):
        assert re.fullmatch(text["pattern"], audience if isinstance(audience, str) else "x")
        assert upload(audience).status_code == 202, audience
    too_long = "a" * 201
    assert not re.fullmatch(text["pattern"], too_long)
    assert upload(too_long).status_code == 400


# -- 7. PostgreSQL down -------------------------------------------------------------------


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_postgresql_down_is_a_503_with_retry_after_on_every_kind_of_route(
    make_platform: MakePlatform, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{unused_port()}/speedtier"
    platform = make_platform(
        database_url=nowhere, internal_api_token=TOKEN, api_max_body_bytes=MAX_BODY
    )
    client = create_app(platform).test_client()
    key = {"Authorization": "Bearer stk_some_key"}
    upload = {"file": (io.BytesIO(b"some words"), "a.txt", "text/plain")}
    answers = [
        client.post(
            "/internal/ingestion/api_keys",
            json={"organization_id": 7, "name": "x"},
            headers=INTERNAL,
        ),
        client.get("/knowledge-bases", headers=key),
        client.post("/knowledge-bases", json={"name": "Docs"}, headers=key),
        client.post("/search", json={"query": "refunds"}, headers=key),
        client.post(
            "/knowledge-bases/1/documents",
            data=upload,
            headers=key,
            content_type="multipart/form-data",
        ),
        client.post(
            "/internal/knowledge_base_sync/enqueue",
            json={"requests": [{"kind": "sync_source", "organization_id": 7, "source_id": 1}]},
            headers=INTERNAL,
        ),
    ]

    for response in answers:
        assert response.status_code == 503, (response.request.path, response.json)
        assert response.headers["Retry-After"] == "5"
        assert response.json == {
            "error": "database_unavailable",
            "message": "PostgreSQL is unreachable; retry later.",
        }
    assert "PostgreSQL unavailable, answering 503" in caplog.text
