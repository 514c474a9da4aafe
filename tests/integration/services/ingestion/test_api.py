"""The ingestion API (seed 003) against real PostgreSQL (the float8[] fallback) and Redis,
with a real worker thread running the ingestion jobs the uploads enqueue.

Covered: every upload form (text, markdown, HTML, DOCX, URL) from 202 ``processing`` to
``ready`` and found by search; failures that end ``failed`` with a reason (truncated PDF,
wrong file type); retry; re-upload, versions, diff and rollback; tenant isolation; every
bad input refused with a 400 (or 413) that stores nothing; API key authentication and
provisioning; body limits per route; the OpenAPI document.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import docx
import pytest
from flask import Flask
from flask.testing import FlaskClient
from pypdf import PdfWriter
from sqlalchemy import func, select
from werkzeug.test import TestResponse

from services.app.bootstrap import Platform
from services.ingestion import store
from services.ingestion.families import ingest_job_id
from services.ingestion.routes import UPLOAD_BODY_LIMIT
from services.ingestion.store import documents_to_ingest
from shared.db.models import IngestionApiKey, KbDocument, KnowledgeBase
from shared.db.models.ingestion import MAX_SOURCE_BYTES
from shared.errors import QueueUnavailable
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import (
    Tenant,
    new_org,
    new_tenant,
    provision,
)
from tests.platform_harness import serving

TOKEN = "internal-secret"
INTERNAL = {"Authorization": f"Bearer {TOKEN}"}
#: The app's own body limit, far under an upload's: the upload route must lift it.
MAX_BODY = 64 * 1024


# -- the platform, the app and a worker ----------------------------------------------------


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(internal_api_token=TOKEN, api_max_body_bytes=MAX_BODY)


@contextlib.contextmanager
def running_worker(platform: Platform) -> Iterator[None]:
    """A real worker, in a thread, over the fast tier's queues (where ingestion runs)."""
    with serving(platform.broker, platform.registry.queues_of_tier("fast"), threads=2):
        yield


@pytest.fixture
def worker(platform: Platform) -> Iterator[None]:
    with running_worker(platform):
        yield


# -- tenants and calls ---------------------------------------------------------------------


@pytest.fixture
def tenant_factory(client: FlaskClient) -> Callable[[], Tenant]:
    return lambda: new_tenant(client, INTERNAL)


@pytest.fixture
def tenant(tenant_factory: Callable[[], Tenant]) -> Tenant:
    return tenant_factory()


def stored(platform: Platform, organization_id: int) -> tuple[int, int]:
    """(knowledge bases, documents) the organization has in PostgreSQL, deleted included."""
    with platform.sessions() as session:
        bases = session.scalar(
            select(func.count()).where(KnowledgeBase.organization_id == organization_id)
        )
        documents = session.scalar(
            select(func.count()).where(KbDocument.organization_id == organization_id)
        )
    return int(bases or 0), int(documents or 0)


def processing_documents(platform: Platform) -> set[int]:
    """Every document the sweep tick would pick up (bounds lifted)."""
    with platform.sessions() as session:
        due = documents_to_ingest(session, limit=10**6, tenant_slice=10**6)
    return {d.document_id for d in due}


# -- documents of each kind ----------------------------------------------------------------


def docx_bytes(*paragraphs: str) -> bytes:
    document = docx.Document()
    document.add_heading("Handbook", level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def pdf_bytes(text: str) -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    writer.add_metadata({"/Title": text})
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(64)


def prose(word: str) -> str:
    return (
        f"The {word} procedure explains how support agents handle refunds. "
        f"Every {word} request is logged, reviewed and answered within a day."
    )


# -- uploads to ready, and search ----------------------------------------------------------


def test_every_upload_form_goes_processing_to_ready_and_is_searchable(
    tenant: Tenant, worker: None
) -> None:
    base = tenant.create_base("Support", refresh_schedule="daily")
    uploads = {
        "text": tenant.add_text(base, "refunds", prose("quokkatext")),
        "markdown": tenant.upload(
            base, f"# Guide\n\n{prose('quokkamark')}\n".encode(), "guide.md", "text/markdown"
        ),
        "html": tenant.upload(
            base,
            f"<html><head><title>FAQ</title></head><body><main><h1>FAQ</h1>"
            f"<p>{prose('quokkahtml')}</p></main></body></html>".encode(),
            "faq.html",
            "text/html",
        ),
        "docx": tenant.upload(
            base,
            docx_bytes(prose("quokkadocx")),
            "handbook.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            audience="staff, agents",
        ),
    }
    ids: dict[str, int] = {}
    for kind, response in uploads.items():
        assert response.status_code == 202, (kind, response.json)
        body = response.json
        assert body is not None
        assert body["status"] == "processing" and body["enqueued"] is True, kind
        assert body["replaced"] is False and body["current_version"] == 0
        assert response.headers["Location"] == f"/knowledge-bases/{base}/documents/{body['id']}"
        ids[kind] = body["id"]
    assert uploads["docx"].json["audience"] == ["agents", "staff"]  # type: ignore[index]
    assert uploads["markdown"].json["name"] == "guide.md"  # type: ignore[index]
    assert uploads["text"].json["kind"] == "text"  # type: ignore[index]

    for kind, document_id in ids.items():
        document = tenant.settled(base, document_id)
        assert document["status"] == "ready", (kind, document["failure_reason"])
        assert document["current_version"] == 1 and document["ready_at"] is not None
        assert document["failure_reason"] is None

    for kind, word in [("text", "quokkatext"), ("markdown", "quokkamark"), ("html", "quokkahtml")]:
        hits = tenant.search(word, base)
        assert hits and hits[0]["document_id"] == ids[kind], (kind, hits)
        assert word in hits[0]["snippet"]
        assert set(hits[0]) == {
            "document_id",
            "chunk_id",
            "knowledge_base_id",
            "score",
            "snippet",
            "content",
            "document_name",
            "document_version",
            "position",
        }
        assert word in hits[0]["content"] and hits[0]["document_version"] == 1
        assert hits[0]["document_name"] == {"text": "refunds", "markdown": "guide.md"}.get(
            kind, "faq.html"
        )
        assert tenant.search(word)[0]["document_id"] == ids[kind]  # across every base

    # The DOCX is for staff and agents only.
    assert all(h["document_id"] != ids["docx"] for h in tenant.search("quokkadocx", base))
    hits = tenant.search("quokkadocx", base, audience=["staff"])
    assert hits[0]["document_id"] == ids["docx"]
    assert tenant.search("quokkatext", base, top_k=1) == tenant.search("quokkatext", top_k=1)

    # Listing, with keyset paging and a status filter.
    first = tenant.call("GET", f"/knowledge-bases/{base}/documents?limit=3").json
    assert first is not None and len(first["documents"]) == 3
    rest = tenant.call(
        "GET", f"/knowledge-bases/{base}/documents?limit=3&after={first['next_after']}"
    ).json
    assert rest is not None and rest["next_after"] is None
    listed = [d["id"] for d in first["documents"] + rest["documents"]]
    assert listed == sorted(ids.values())
    assert {d["status"] for d in first["documents"] + rest["documents"]} == {"ready"}
    failed = tenant.call("GET", f"/knowledge-bases/{base}/documents?status=failed").json
    assert failed == {"documents": [], "next_after": None}


def test_a_url_document_is_stored_with_its_crawl_options(tenant: Tenant) -> None:
    base = tenant.create_base()
    response = tenant.call(
        "POST",
        f"/knowledge-bases/{base}/documents",
        {
            "url": "HTTPS://Example.com/help",
            "crawl_depth": 2,
            "connector": "zendesk",
            "audience": ["staff"],
        },
    )
    assert response.status_code == 202, response.json
    body = response.json
    assert body is not None
    assert (body["kind"], body["url"], body["crawl_depth"]) == (
        "url",
        "https://example.com/help",
        2,
    )
    assert (body["name"], body["connector"], body["audience"]) == (
        "https://example.com/help",
        "zendesk",
        ["staff"],
    )
    assert body["status"] == "processing"


def test_unreadable_uploads_are_accepted_and_end_failed_with_a_reason(
    tenant: Tenant, worker: None
) -> None:
    base = tenant.create_base()
    whole = pdf_bytes("manual")
    truncated = tenant.upload(base, whole[: len(whole) // 2], "manual.pdf", "application/pdf")
    wrong_type = tenant.upload(base, PNG, "diagram.png", "image/png")
    for response in (truncated, wrong_type):
        assert response.status_code == 202, response.json
        assert response.json["status"] == "processing"  # type: ignore[index]

    pdf = tenant.settled(base, truncated.json["id"])  # type: ignore[index]
    assert pdf["status"] == "failed" and pdf["failed_at"] is not None
    assert pdf["failure_reason"].startswith("truncated or unreadable file")
    png = tenant.settled(base, wrong_type.json["id"])  # type: ignore[index]
    assert (png["status"], png["failure_reason"]) == ("failed", "unsupported content type")

    # Retry re-runs against the same bytes, which fail the same way.
    retried = tenant.call("POST", f"/knowledge-bases/{base}/documents/{png['id']}/retry")
    assert retried.status_code == 202
    assert retried.json is not None and retried.json["status"] == "processing"
    assert retried.json["failure_reason"] is None
    again = tenant.settled(base, png["id"])
    assert (again["status"], again["failure_reason"]) == ("failed", "unsupported content type")


def test_an_unavailable_queue_still_answers_202_and_leaves_the_document_to_the_sweep(
    tenant: Tenant, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tenant.create_base()

    def refuse(*_args: object) -> None:
        raise QueueUnavailable("Redis did not accept the jobs")

    with monkeypatch.context() as patched:
        patched.setattr(platform.router, "enqueue_routed", refuse)
        response = tenant.add_text(base, "faq", prose("wombatsweep"))
    assert response.status_code == 202
    body = response.json
    assert body is not None and (body["status"], body["enqueued"]) == ("processing", False)
    assert platform.broker.jobs.record(ingest_job_id(body["id"])) is None
    assert body["id"] in processing_documents(platform)  # the minute sweep's query finds it

    # A retry (or the sweep) enqueues it; the worker ingests it.
    retried = tenant.call("POST", f"/knowledge-bases/{base}/documents/{body['id']}/retry")
    assert retried.status_code == 202 and retried.json["enqueued"] is True  # type: ignore[index]
    with running_worker(platform):
        assert tenant.settled(base, body["id"])["status"] == "ready"
    assert tenant.search("wombatsweep", base)[0]["document_id"] == body["id"]


# -- versions, diff, rollback --------------------------------------------------------------


def test_reupload_versions_diff_and_rollback(
    tenant: Tenant, platform: Platform, worker: None
) -> None:
    base = tenant.create_base()
    first = tenant.add_text(base, "policy", "Refunds take alpha days.\nShipping is free.\n")
    document_id = first.json["id"]  # type: ignore[index]
    assert tenant.settled(base, document_id)["current_version"] == 1

    second = tenant.add_text(base, "policy", "Refunds take betawave days.\nShipping is free.\n")
    assert second.status_code == 202
    assert second.json is not None
    assert (second.json["id"], second.json["replaced"]) == (document_id, True)
    assert tenant.settled(base, document_id)["current_version"] == 2

    path = f"/knowledge-bases/{base}/documents/{document_id}"
    versions = tenant.call("GET", f"{path}/versions").json
    assert versions is not None
    assert [(v["version"], v["is_current"]) for v in versions["versions"]] == [
        (2, True),
        (1, False),
    ]
    assert all(len(v["content_hash"]) == 64 for v in versions["versions"])

    diff = tenant.call("GET", f"{path}/versions/diff?from=1&to=2").json
    assert diff is not None and (diff["from_version"], diff["to_version"]) == (1, 2)
    assert "-Refunds take alpha days." in diff["diff"]
    assert "+Refunds take betawave days." in diff["diff"]
    assert " Shipping is free." in diff["diff"]
    assert diff["diff"].startswith("--- version 1\n+++ version 2\n")
    same = tenant.call("GET", f"{path}/versions/diff?from=2&to=2").json
    assert same is not None and same["diff"] == ""

    rolled = tenant.call("POST", f"{path}/rollback", {"version": 1})
    assert rolled.status_code == 202, rolled.json
    assert rolled.json is not None
    assert (rolled.json["status"], rolled.json["enqueued"]) == ("processing", True)
    assert tenant.settled(base, document_id)["current_version"] == 3
    again = tenant.call("POST", f"{path}/rollback", {"version": 3})
    assert again.status_code == 200 and again.json["status"] == "ready"  # type: ignore[index]
    versions = tenant.call("GET", f"{path}/versions").json
    assert versions is not None
    assert [(v["version"], v["is_current"]) for v in versions["versions"]] == [
        (3, True),
        (2, False),
        (1, False),
    ]
    back = tenant.call("GET", f"{path}/versions/diff?from=1&to=3").json
    assert back is not None and back["diff"] == ""
    snippets = " ".join(h["snippet"] for h in tenant.search("refunds days", base))
    assert "alpha" in snippets and "betawave" not in snippets

    # A version not kept, a document being ingested.
    missing = tenant.call("POST", f"{path}/rollback", {"version": 99})
    assert missing.status_code == 404
    assert tenant.call("GET", f"{path}/versions/diff?from=1&to=99").status_code == 404
    with platform.sessions() as session:
        store.mark_for_retry(
            session, organization_id=tenant.organization_id, document_id=document_id
        )
        session.commit()  # processing, with no job: nothing will take it meanwhile
    busy = tenant.call("POST", f"{path}/rollback", {"version": 2})
    assert busy.status_code == 409 and busy.json["error"] == "conflict"  # type: ignore[index]


# -- deleting ------------------------------------------------------------------------------


def test_deleting_a_document_and_a_base(tenant: Tenant, worker: None) -> None:
    base = tenant.create_base()
    keep = tenant.add_text(base, "keep", prose("numbatkeep")).json["id"]  # type: ignore[index]
    drop = tenant.add_text(base, "drop", prose("numbatdrop")).json["id"]  # type: ignore[index]
    for document_id in (keep, drop):
        assert tenant.settled(base, document_id)["status"] == "ready"

    assert tenant.call("DELETE", f"/knowledge-bases/{base}/documents/{drop}").status_code == 204
    assert tenant.call("GET", f"/knowledge-bases/{base}/documents/{drop}").status_code == 404
    assert tenant.call("DELETE", f"/knowledge-bases/{base}/documents/{drop}").status_code == 404
    assert all(h["document_id"] != drop for h in tenant.search("numbatdrop", base))

    assert tenant.call("DELETE", f"/knowledge-bases/{base}").status_code == 204
    assert tenant.call("GET", f"/knowledge-bases/{base}").status_code == 404
    assert tenant.call("GET", f"/knowledge-bases/{base}/documents").status_code == 404
    assert tenant.call("POST", f"/knowledge-bases/{base}/search", {"query": "x"}).status_code == 404
    assert tenant.search("numbatkeep") == []
    listed = tenant.call("GET", "/knowledge-bases").json
    assert listed == {"knowledge_bases": [], "next_after": None}


# -- tenant isolation ----------------------------------------------------------------------


def test_another_organizations_ids_answer_404_like_missing_ones(
    tenant_factory: Callable[[], Tenant], platform: Platform, worker: None
) -> None:
    a, b = tenant_factory(), tenant_factory()
    a_base = a.create_base("A's")
    a_doc = a.add_text(a_base, "secret", prose("platypussecret")).json["id"]  # type: ignore[index]
    assert a.settled(a_base, a_doc)["status"] == "ready"
    b_base = b.create_base("B's")
    b_doc = b.add_text(b_base, "public", prose("platypuspublic")).json["id"]  # type: ignore[index]
    assert b.settled(b_base, b_doc)["status"] == "ready"
    missing = 9_000_000_000_000

    def base_probes(base: int) -> list[tuple[str, str, Any]]:
        return [
            ("GET", f"/knowledge-bases/{base}", None),
            ("DELETE", f"/knowledge-bases/{base}", None),
            ("GET", f"/knowledge-bases/{base}/documents", None),
            ("POST", f"/knowledge-bases/{base}/documents", {"name": "x", "text": "intruder"}),
            ("POST", f"/knowledge-bases/{base}/search", {"query": "platypussecret"}),
        ]

    def document_probes(base: int, document: int) -> list[tuple[str, str, Any]]:
        at = f"/knowledge-bases/{base}/documents/{document}"
        return [
            ("GET", at, None),
            ("DELETE", at, None),
            ("POST", f"{at}/retry", None),
            ("GET", f"{at}/versions", None),
            ("GET", f"{at}/versions/diff?from=1&to=1", None),
            ("POST", f"{at}/rollback", {"version": 1}),
        ]

    before = stored(platform, a.organization_id), stored(platform, b.organization_id)
    cross = (
        base_probes(a_base)
        + document_probes(a_base, a_doc)
        + document_probes(b_base, a_doc)  # A's document under B's own base
    )
    absent = (
        base_probes(missing) + document_probes(missing, missing) + document_probes(b_base, missing)
    )
    for (method, path, body), (_, absent_path, _) in zip(cross, absent, strict=True):
        response = b.call(method, path, body)
        reference = b.call(method, absent_path, body)
        assert response.status_code == reference.status_code == 404, (method, path)
        assert response.json is not None and reference.json is not None
        assert response.json["error"] == reference.json["error"] == "not_found"
        assert set(response.json) == set(reference.json)
        # The same words; only the id differs.
        assert re.sub(r"\d+", "N", response.json["message"]) == re.sub(
            r"\d+", "N", reference.json["message"]
        )
    assert (stored(platform, a.organization_id), stored(platform, b.organization_id)) == before

    # B never sees A's chunks; A's document is untouched.
    assert all(h["document_id"] != a_doc for h in b.search("platypussecret"))
    assert all(h["document_id"] != a_doc for h in b.search("platypussecret", b_base, top_k=50))
    assert a.search("platypussecret")[0]["document_id"] == a_doc
    assert a.document(a_base, a_doc)["status"] == "ready"
    assert [kb["id"] for kb in b.call("GET", "/knowledge-bases").json["knowledge_bases"]] == [  # type: ignore[index]
        b_base
    ]


# -- authentication and provisioning -------------------------------------------------------


def public_routes(app: Flask) -> list[tuple[str, str]]:
    routes = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("ingestion.") and not rule.rule.startswith("/internal"):
            concrete = "/".join(
                "1" if part.startswith("<") else part for part in rule.rule.split("/")
            )
            for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                routes.append((method, concrete))
    return routes


def test_every_public_route_needs_a_live_key(
    app: Flask, client: FlaskClient, tenant: Tenant, platform: Platform
) -> None:
    routes = public_routes(app)
    assert len(routes) == 26
    assert ("POST", "/knowledge-bases/1/documents") in routes
    assert ("GET", "/usage") in routes
    assert ("POST", "/connections") in routes
    assert ("POST", "/knowledge-bases/1/connectors/1/sync") in routes
    revoked = provision(client, tenant.organization_id, INTERNAL, "old").json
    assert revoked is not None
    with platform.sessions() as session:
        store.revoke_api_key(session, organization_id=tenant.organization_id, key_id=revoked["id"])
        session.commit()

    # Each route's wrong keys from an address of its own: the failed-authentication limit
    # per address (test_auth_throttle) stays out of the way.
    for number, (method, path) in enumerate(routes):
        client.environ_base["REMOTE_ADDR"] = f"192.0.2.{number + 1}"
        for headers, reason in (
            ({}, "missing API key"),
            ({"Authorization": "Bearer stk_wrong"}, "unknown or revoked API key"),
            ({"Authorization": f"Basic {tenant.key}"}, "missing API key"),
            ({"Authorization": "Bearer "}, "missing API key"),
            ({"Authorization": f"Bearer {revoked['key']}"}, "unknown or revoked API key"),
            (INTERNAL, "unknown or revoked API key"),  # the internal token is not a key
        ):
            response = client.open(path, method=method, headers=headers, json={"name": "x"})
            assert response.status_code == 401, (method, path, headers)
            assert response.json == {"error": "unauthorized", "message": reason}
            assert response.headers["WWW-Authenticate"].startswith(
                'Bearer realm="speedtier-ingestion"'
            )
    assert stored(platform, tenant.organization_id) == (0, 0)
    assert tenant.call("GET", "/knowledge-bases").status_code == 200


def test_provisioning_keys_through_the_internal_route(
    client: FlaskClient, platform: Platform
) -> None:
    organization_id = new_org()
    response = provision(client, organization_id, INTERNAL, "Rails production")
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    created = response.json
    assert created is not None
    assert (created["organization_id"], created["name"]) == (organization_id, "Rails production")
    assert created["key"].startswith("stk_") and len(created["key"]) > 40
    with platform.sessions() as session:
        row = session.get(IngestionApiKey, created["id"])
        assert row is not None
        assert row.key_hash == hashlib.sha256(created["key"].encode()).hexdigest()
    second = provision(client, organization_id, INTERNAL).json
    assert second is not None and second["key"] != created["key"]
    listed = client.get("/knowledge-bases", headers={"Authorization": f"Bearer {created['key']}"})
    assert listed.status_code == 200

    # Only with the internal token; bad bodies are refused field by field.
    assert (
        client.post(
            "/internal/ingestion/api_keys",
            json={"organization_id": organization_id, "name": "x"},
            headers={"Authorization": f"Bearer {created['key']}"},
        ).status_code
        == 401
    )
    for body, field in (
        ({"organization_id": str(organization_id), "name": "x"}, "organization_id"),
        ({"organization_id": 0, "name": "x"}, "organization_id"),
        ({"organization_id": 2**63, "name": "x"}, "organization_id"),
        ({"organization_id": organization_id}, "name"),
        ({"organization_id": organization_id, "name": "  "}, "name"),
        ({"organization_id": organization_id, "name": "x", "admin": True}, "admin"),
    ):
        refused = client.post("/internal/ingestion/api_keys", json=body, headers=INTERNAL)
        assert refused.status_code == 400, body
        assert field in refused.json["fields"], refused.json  # type: ignore[index]
    with platform.sessions() as session:
        keys = session.scalar(
            select(func.count()).where(IngestionApiKey.organization_id == organization_id)
        )
    assert keys == 2


# -- bad input -----------------------------------------------------------------------------


def assert_invalid(response: TestResponse, field: str, message: str | None = None) -> None:
    assert response.status_code == 400, response.json
    body = response.json
    assert body is not None and body["error"] == "invalid_request"
    assert field in body["fields"], body
    if message is not None:
        assert message in body["fields"][field], body


def test_bad_knowledge_base_bodies_are_refused_and_store_nothing(
    tenant: Tenant, platform: Platform
) -> None:
    cases: list[tuple[Any, str, str | None]] = [
        (b'{"name": "Docs"', "body", "Invalid JSON"),
        (b"", "body", None),
        (b"[]", "body", None),
        ({"name": 5}, "name", "valid string"),
        ({}, "name", "Field required"),
        ({"name": ""}, "name", None),
        ({"name": "x" * 256}, "name", None),
        ({"name": "Docs", "refresh_schedule": "monthly"}, "refresh_schedule", "hourly"),
        ({"name": "Docs", "refresh_schedule": 1}, "refresh_schedule", None),
        ({"name": "Docs", "owner": 3}, "owner", "Extra inputs"),
    ]
    for body, field, message in cases:
        assert_invalid(tenant.call("POST", "/knowledge-bases", body), field, message)
    as_form = tenant.client.post("/knowledge-bases", data={"name": "Docs"}, headers=tenant.auth)
    assert_invalid(as_form, "body", "application/json")
    as_text = tenant.call("POST", "/knowledge-bases", '{"name": "Docs"}', content_type="text/plain")
    assert_invalid(as_text, "body", "application/json")
    assert stored(platform, tenant.organization_id) == (0, 0)

    for query, field in (("limit=0", "limit"), ("limit=abc", "limit"), ("after=-1", "after")):
        assert_invalid(tenant.call("GET", f"/knowledge-bases?{query}"), field)
    assert_invalid(tenant.call("GET", "/knowledge-bases?cursor=3"), "cursor")
    beyond_bigint = f"/knowledge-bases/{2**63}"
    assert tenant.call("GET", beyond_bigint).status_code == 404
    assert tenant.call("GET", "/knowledge-bases/0").status_code == 404


def test_bad_document_bodies_are_refused_and_store_nothing(
    tenant: Tenant, platform: Platform
) -> None:
    base = tenant.create_base()
    path = f"/knowledge-bases/{base}/documents"
    cases: list[tuple[Any, str, str | None]] = [
        (b'{"name": "a", "text": ', "body", "Invalid JSON"),
        ({"name": "a", "text": 5}, "text", "valid string"),
        ({"name": "a", "text": ""}, "text", None),
        ({"text": "hello"}, "name", "Field required"),
        ({"name": "a"}, "body", "either text or url"),
        ({"name": "a", "text": "hi", "url": "https://example.com/"}, "body", "either text or url"),
        ({"name": "a", "text": "hi", "crawl_depth": 1}, "crawl_depth", "only for a url"),
        ({"name": "a", "text": "hi", "connector": "notion"}, "connector", "only for a url"),
        ({"name": "a", "text": "hi", "audience": "staff"}, "audience", "valid array"),
        ({"name": "a", "text": "hi", "audience": [""]}, "audience[0]", None),
        ({"name": "a", "text": "hi", "extra": 1}, "extra", "Extra inputs"),
        ({"url": "ftp://example.com/file"}, "url", "http(s)"),
        ({"url": "https://user:pw@example.com/"}, "url", "http(s)"),
        ({"url": "https://example.com/", "crawl_depth": 6}, "crawl_depth", None),
        ({"url": "https://example.com/", "crawl_depth": "1"}, "crawl_depth", None),
        ({"url": "https://example.com/", "crawl_depth": True}, "crawl_depth", None),
    ]
    for body, field, message in cases:
        assert_invalid(tenant.call("POST", path, body), field, message)

    as_text = tenant.call("POST", path, "just some text", content_type="text/plain")
    assert_invalid(as_text, "body", "multipart/form-data")
    zero = tenant.upload(base, b"", "empty.txt", "text/plain")
    assert_invalid(zero, "file", "zero-byte file")
    no_file = tenant.client.post(
        path, data={"name": "x"}, headers=tenant.auth, content_type="multipart/form-data"
    )
    assert_invalid(no_file, "file", "Field required")
    file_as_field = tenant.client.post(
        path,
        data={"file": "not a file part"},
        headers=tenant.auth,
        content_type="multipart/form-data",
    )
    assert_invalid(file_as_field, "file")
    assert_invalid(tenant.upload(base, b"hello", "a.txt", "text/plain", owner="x"), "owner")
    assert_invalid(tenant.upload(base, b"hello", "a.txt", "text/plain", name=" "), "name")
    assert_invalid(tenant.upload(base, b"hello", "", "text/plain"), "name", "no name")
    assert stored(platform, tenant.organization_id) == (1, 0)

    # Other bodies of the document routes.
    document = tenant.add_text(base, "doc", "Some words.").json
    assert document is not None
    at = f"{path}/{document['id']}"
    for body, field in (
        ({}, "version"),
        ({"version": "1"}, "version"),
        ({"version": 0}, "version"),
        (b"{", "body"),
    ):
        assert_invalid(tenant.call("POST", f"{at}/rollback", body), field)
    for query, field in (("from=1", "to"), ("from=x&to=1", "from"), ("from=0&to=1", "from")):
        assert_invalid(tenant.call("GET", f"{at}/versions/diff?{query}"), field)
    for query, field in (("status=done", "status"), ("limit=101", "limit")):
        assert_invalid(tenant.call("GET", f"{path}?{query}"), field)
    for search in ("/search", f"/knowledge-bases/{base}/search"):
        for body, field in (
            ({}, "query"),
            ({"query": ""}, "query"),
            ({"query": 3}, "query"),
            ({"query": "x", "top_k": 0}, "top_k"),
            ({"query": "x", "top_k": 51}, "top_k"),
            ({"query": "x", "top_k": "10"}, "top_k"),
            ({"query": "x", "audience": "staff"}, "audience"),
        ):
            assert_invalid(tenant.call("POST", search, body), field)
        assert_invalid(tenant.call("POST", search, "x", content_type="text/plain"), "body")
    assert stored(platform, tenant.organization_id) == (1, 1)


# -- body limits ---------------------------------------------------------------------------


def test_uploads_may_reach_10_mb_while_other_routes_keep_the_apps_limit(
    tenant: Tenant, client: FlaskClient, platform: Platform
) -> None:
    base = tenant.create_base()
    over_app_limit = b"word " * (MAX_BODY // 2)  # 160 KB, over the app's 64 KB
    accepted = tenant.upload(base, over_app_limit, "big.txt", "text/plain")
    assert accepted.status_code == 202, accepted.json

    ten_mb = tenant.upload(base, b"a" * MAX_SOURCE_BYTES, "ten.txt", "text/plain")
    assert ten_mb.status_code == 202, ten_mb.json
    documents = stored(platform, tenant.organization_id)[1]
    assert documents == 2

    # Content over 10 MB inside the body limit: the store refuses it.
    over = tenant.upload(base, b"a" * (MAX_SOURCE_BYTES + 1), "over.txt", "text/plain")
    assert over.status_code == 413
    assert over.json == {
        "error": "payload_too_large",
        "message": "content over 10 MB",
        "limit_bytes": MAX_SOURCE_BYTES,
    }
    text = tenant.add_text(base, "over", "a" * (MAX_SOURCE_BYTES + 1))
    assert text.status_code == 413
    # A body over the upload route's own limit.
    huge = tenant.upload(base, b"a" * UPLOAD_BODY_LIMIT, "huge.txt", "text/plain")
    assert huge.status_code == 413
    assert huge.json is not None and huge.json["limit_bytes"] == UPLOAD_BODY_LIMIT
    assert stored(platform, tenant.organization_id) == (1, documents)

    # Every other route keeps the app's limit, /internal included.
    padding = "x" * MAX_BODY
    small = tenant.call("POST", "/knowledge-bases", {"name": "Docs", "pad": padding})
    assert small.status_code == 413
    assert small.json is not None and small.json["limit_bytes"] == MAX_BODY
    search = tenant.call("POST", "/search", {"query": padding})
    assert search.status_code == 413
    internal = client.post(
        "/internal/ingestion/api_keys",
        json={"organization_id": tenant.organization_id, "name": padding},
        headers=INTERNAL,
    )
    assert internal.status_code == 413
    assert internal.json is not None and internal.json["limit_bytes"] == MAX_BODY
    assert stored(platform, tenant.organization_id) == (1, documents)

    # Nothing is left for the sweep to ingest.
    for document in tenant.call("GET", f"/knowledge-bases/{base}/documents").json["documents"]:  # type: ignore[index]
        tenant.call("DELETE", f"/knowledge-bases/{base}/documents/{document['id']}")


# -- the OpenAPI document ------------------------------------------------------------------


def test_the_openapi_document_describes_every_ingestion_route(client: FlaskClient) -> None:
    document = client.get("/internal/openapi.json", headers=INTERNAL).json
    assert document is not None
    paths = document["paths"]
    documents = "/knowledge-bases/{knowledge_base_id}/documents"
    one = f"{documents}/{{document_id}}"
    expected = {
        "/knowledge-bases": {"get", "post"},
        "/knowledge-bases/{knowledge_base_id}": {"get", "delete"},
        documents: {"get", "post"},
        one: {"get", "delete"},
        f"{one}/retry": {"post"},
        f"{one}/versions": {"get"},
        f"{one}/versions/diff": {"get"},
        f"{one}/rollback": {"post"},
        "/knowledge-bases/{knowledge_base_id}/search": {"post"},
        "/search": {"post"},
        "/usage": {"get"},
        "/internal/ingestion/api_keys": {"post"},
        "/connections": {"get", "post"},
        "/connections/{connection_id}": {"get", "put", "delete"},
        "/knowledge-bases/{knowledge_base_id}/connectors": {"get", "post"},
        "/knowledge-bases/{knowledge_base_id}/connectors/{binding_id}": {"get", "delete"},
        "/knowledge-bases/{knowledge_base_id}/connectors/{binding_id}/sync": {"post"},
        f"{one}/connector": {"put"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) == methods, path
        for method in methods:
            operation = paths[path][method]
            assert operation["summary"] != operation["operationId"], (path, method)
            # public routes need an organization's API key, /internal ones the internal token
            scheme = "bearerAuth" if path.startswith("/internal") else "apiKeyAuth"
            assert operation["security"] == [{scheme: []}], (path, method)
            assert operation["tags"] == ["ingestion"]
    upload = paths[documents]["post"]
    assert upload["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DocumentJsonCreate"
    }
    assert {"202", "400", "401", "404", "413"} <= set(upload["responses"])
    assert "multipart/form-data" in upload["description"]
    diff = paths[f"{one}/versions/diff"]["get"]
    assert {p["name"] for p in diff["parameters"]} >= {"from", "to", "document_id"}
    schemas = document["components"]["schemas"]
    for name in ("DocumentAccepted", "DocumentOut", "SearchResults", "ApiKeyCreated"):
        assert name in schemas
    hit = schemas["SearchHitOut"]["properties"]
    assert {"content", "document_name", "document_version", "position"} <= set(hit)
    assert {p["name"] for p in paths["/usage"]["get"]["parameters"]} == {"since", "until"}
    assert schemas["KnowledgeBaseCreate"]["properties"]["refresh_schedule"]
