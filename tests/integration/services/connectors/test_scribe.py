"""ScribeProvider against a local server speaking Scribe's published Search & Retrieval API
(https://public-api.scribehow.com/schema/redoc/); the fake's answers are checked against
the published schema (Scribe has no Python SDK), so the fake cannot share the client's
mistakes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import jsonschema
import pytest
import requests

from services.connectors.base import SourceConfig
from services.connectors.scribe import (
    DEFAULT_BASE_URL,
    ScribeProvider,
    SessionTokenSource,
    render_editorjs,
    uses_session_token,
)
from shared.errors import Delay, JobError, Retryable, Unrecoverable
from testkit.fakes.protocol_server import TRANSIENT_FAILURES, ProtocolServer, Reply, Request
from testkit.fakes.scribe_server import LIST_PATH, ScribeServer, action

KEY = "sc_1234567890abcdefg.hijklmnopqrstuvwx"

#: From Scribe's published OpenAPI 3.1 schema (components.schemas), as JSON Schema.
_ACTION = {
    "type": "object",
    "required": ["description", "id", "screenshot_url"],
    "properties": {
        "description": {"type": "string"},
        "id": {"type": "string", "format": "uuid"},
        "screenshot_url": {"type": ["string", "null"]},
    },
}
DOCUMENT_DETAIL = {
    "type": "object",
    "required": [
        "actions",
        "content",
        "created_at",
        "description",
        "id",
        "link",
        "name",
        "team",
        "type",
        "updated_at",
    ],
    "properties": {
        "actions": {"type": "array", "items": _ACTION},
        "content": {"type": ["object", "null"]},
        "id": {"type": "string", "format": "uuid"},
        "link": {"type": "string"},
        "name": {"type": "string"},
        "type": {"enum": ["page", "scribe"]},
        "team": {"type": "object", "required": ["id", "name"]},
        "updated_at": {"type": "string"},
    },
}
PAGINATED = {
    "type": "object",
    "required": ["count", "results"],
    "properties": {
        "count": {"type": "integer"},
        "next": {"type": ["string", "null"]},
        "previous": {"type": ["string", "null"]},
        "results": {"type": "array", "items": DOCUMENT_DETAIL},
    },
}


@pytest.fixture
def server() -> Iterator[ScribeServer]:
    fake = ScribeServer(KEY, max_limit=7)
    with fake:
        yield fake


@pytest.fixture
def config(server: ScribeServer) -> SourceConfig:
    return SourceConfig(
        source_id=21,
        organization_id=3,
        source_type="scribe",
        base_url=server.base_url,
        settings={"api_key": KEY},
        timeout=5.0,
    )


provider = ScribeProvider()


def offsets(server: ScribeServer) -> list[int]:
    return [int(r.param("offset") or 0) for r in server.requests_to(LIST_PATH)]


# -- the fake against the published schema ---------------------------------------------------


def test_the_fake_answers_the_published_schema(server: ScribeServer) -> None:
    server.add_scribe("Reset a password", [action("Open settings", "https://img.test/1.png")])
    page = server.add_page("Handbook", [{"type": "paragraph", "data": {"text": "Hi"}}])
    headers = {"X-API-Key": KEY}

    listed = requests.get(f"{server.base_url}{LIST_PATH}", headers=headers, timeout=5).json()
    jsonschema.validate(listed, PAGINATED)
    one = requests.get(f"{server.base_url}{LIST_PATH}{page}/", headers=headers, timeout=5)
    jsonschema.validate(one.json(), DOCUMENT_DETAIL)
    assert one.json()["content"]["blocks"][0]["type"] == "paragraph"
    denied = requests.get(f"{server.base_url}{LIST_PATH}", timeout=5)
    assert denied.status_code == 401 and denied.json() == {"detail": "Invalid API key."}
    assert DEFAULT_BASE_URL == "https://public-api.scribehow.com"


# -- listing ------------------------------------------------------------------------------


def test_listing_follows_next_through_every_page(
    server: ScribeServer, config: SourceConfig
) -> None:
    ids = [server.add_scribe(f"How to {n}") for n in range(45)]

    listing = provider.list_source(config)

    assert listing.complete
    assert [d.identifier for d in listing.documents] == list(reversed(ids))  # newest first
    assert offsets(server) == [0, 7, 14, 21, 28, 35, 42]  # the server caps limit at 7
    assert server.requests_to(LIST_PATH)[0].param("limit") == "100"
    first = listing.documents[0]
    assert first.title == "How to 44" and first.url and first.url.endswith(ids[-1])
    assert first.updated_at is not None and first.content is None
    assert all(r.headers["x-api-key"] == KEY for r in server.requests)


def test_a_list_that_shifts_while_paging_is_incomplete(
    server: ScribeServer, config: SourceConfig
) -> None:
    ids = [server.add_scribe(f"S{n}") for n in range(20)]
    server.on_list(lambda offset: server.remove(ids[-1]) if offset == 0 else None)

    listing = provider.list_source(config)

    assert not listing.complete  # one document slid into the first page and was never seen


def test_an_empty_account_lists_nothing_completely(
    server: ScribeServer, config: SourceConfig
) -> None:
    listing = provider.list_source(config)

    assert listing.documents == [] and listing.complete


class _WrongShape(ProtocolServer):
    """Answers every list request with ``body``."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self.body = body

    def authorized(self, request: Request) -> bool:
        return True

    def route(self, request: Request) -> Reply:
        return Reply(200, self.body)


@pytest.mark.parametrize(
    "body",
    [
        {"data": [], "total": 0},  # the shape the old client expected
        {"data": [{"id": "x", "title": "T"}], "total": 1},
        {"results": [], "count": "0"},
        {"results": {}, "count": 0},
        {"results": [{"name": "no id"}], "count": 1},
        [],
        {},
    ],
)
def test_an_unexpected_shape_is_never_a_complete_empty_listing(body: Any) -> None:
    with _WrongShape(body) as base_url, pytest.raises(Retryable, match="not a documents page"):
        provider.list_source(SourceConfig(1, 1, "scribe", base_url, {"api_key": KEY}))


def test_next_stays_on_the_configured_host(config: SourceConfig) -> None:
    fake = ScribeServer(KEY, max_limit=3, link_host="https://elsewhere.test")
    with fake as base_url:
        for n in range(10):
            fake.add_scribe(f"S{n}")
        listing = provider.list_source(replace(config, base_url=base_url))

    assert len(listing.documents) == 10 and listing.complete
    assert [int(r.param("offset") or 0) for r in fake.requests_to(LIST_PATH)] == [0, 3, 6, 9]


# -- documents ----------------------------------------------------------------------------


def test_actions_render_as_a_numbered_list_with_screenshots(
    server: ScribeServer, config: SourceConfig
) -> None:
    scribe_id = server.add_scribe(
        "Reset a password",
        [
            action("Open <b>Settings</b>", "https://img.example.com/1.png"),
            action("Click Reset\nthen confirm", "https://img.example.com/2.png"),
            action("Done"),
        ],
        description="For support agents.",
    )

    document = provider.fetch_document(config, scribe_id)

    assert document is not None
    assert document.title == "Reset a password"
    assert document.url == server.documents[scribe_id]["link"]
    assert document.updated_at is not None
    assert document.content == (
        "For support agents.\n\n"
        "1. Open **Settings**\n\n"
        "   ![Step 1](https://img.example.com/1.png)\n\n"
        "2. Click Reset\n"
        "   then confirm\n\n"
        "   ![Step 2](https://img.example.com/2.png)\n\n"
        "3. Done"
    )
    assert server.requests[-1].path == f"{LIST_PATH}{scribe_id}/"


def test_a_knowledge_page_renders_its_editorjs_content(
    server: ScribeServer, config: SourceConfig
) -> None:
    page_id = server.add_page(
        "Handbook",
        [
            {"type": "header", "data": {"text": "Refunds", "level": 2}},
            {"type": "paragraph", "data": {"text": 'See <a href="https://a.test">policy</a>.'}},
            {
                "type": "list",
                "data": {
                    "style": "ordered",
                    "items": [{"content": "Check", "items": [{"content": "Twice", "items": []}]}],
                },
            },
            {"type": "list", "data": {"style": "unordered", "items": ["One", "Two"]}},
            {"type": "checklist", "data": {"items": [{"text": "Done", "checked": True}]}},
            {"type": "quote", "data": {"text": "Be kind", "caption": "Ada"}},
            {"type": "code", "data": {"code": "make refund"}},
            {"type": "delimiter", "data": {}},
            {"type": "table", "data": {"withHeadings": True, "content": [["A", "B"], ["1", ""]]}},
            {"type": "image", "data": {"file": {"url": "https://img.test/p.png"}, "caption": "P"}},
            {"type": "warning", "data": {"title": "Note", "message": "Ask first"}},
        ],
    )

    document = provider.fetch_document(config, page_id)

    assert document is not None and document.title == "Handbook"
    assert document.content == (
        "## Refunds\n\nSee [policy](https://a.test).\n\n1. Check\n   1. Twice\n\n- One\n- Two"
        "\n\n- [x] Done\n\n> Be kind\n>\n> — Ada\n\n```\nmake refund\n```\n\n---\n\n"
        "| A | B |\n| --- | --- |\n| 1 |  |\n\n![P](https://img.test/p.png)\n\n"
        "> **Note:** Ask first"
    )


def test_malformed_editorjs_content_renders_what_it_can() -> None:
    assert render_editorjs(None) == ""
    assert render_editorjs({"blocks": [{"type": "mystery", "data": {"text": "kept"}}, 3]}) == (
        "kept"
    )


def test_a_missing_document_is_none(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Gone")
    server.remove(scribe_id)

    assert provider.fetch_document(config, scribe_id) is None


# -- session-token sources ----------------------------------------------------------------


def test_a_session_token_source_is_a_no_op(server: ScribeServer, config: SourceConfig) -> None:
    server.add_scribe("Exists")
    session = replace(config, settings={"session_token": "cookie"})

    listing = provider.list_source(session)

    assert listing.documents == [] and not listing.complete
    with pytest.raises(SessionTokenSource):
        provider.fetch_document(session, "anything")
    assert server.requests == []
    assert uses_session_token(session.settings)


def test_an_api_key_wins_over_a_session_token(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Exists")
    both = replace(config, settings={"session_token": "cookie", "api_key": KEY})

    assert [d.identifier for d in provider.list_source(both).documents] == [scribe_id]
    assert not uses_session_token(both.settings)


# -- failures -----------------------------------------------------------------------------


def test_a_wrong_key_is_unrecoverable(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Exists")
    wrong = replace(config, settings={"api_key": "nope"})

    with pytest.raises(Unrecoverable, match="401"):
        provider.list_source(wrong)
    with pytest.raises(Unrecoverable, match="401"):
        provider.fetch_document(wrong, scribe_id)
    with pytest.raises(Unrecoverable, match="api_key"):
        provider.list_source(replace(config, settings={}))


def test_the_per_minute_limit_answers_429_with_retry_after_which_delays(
    config: SourceConfig,
) -> None:
    fake = ScribeServer(KEY, per_minute=2)
    with fake as base_url:
        scribe_id = fake.add_scribe("Busy")
        scoped = replace(config, base_url=base_url)
        provider.fetch_document(scoped, scribe_id)
        provider.fetch_document(scoped, scribe_id)
        with pytest.raises(Delay) as raised:
            provider.fetch_document(scoped, scribe_id)

    assert time.time() < raised.value.until <= time.time() + 61
    assert raised.value.source == "provider"


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_listing_page_raises(
    server: ScribeServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    for n in range(20):
        server.add_scribe(f"S{n}")
    server.fail(LIST_PATH, kind, after=1, **options)  # the second page of three

    with pytest.raises(error):
        provider.list_source(replace(config, timeout=0.5))

    assert offsets(server) == [0, 7]


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_document_fetch_raises(
    server: ScribeServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    scribe_id = server.add_scribe("Flaky", [action("One")])
    server.fail(f"{LIST_PATH}{scribe_id}/", kind, **options)

    with pytest.raises(error):
        provider.fetch_document(replace(config, timeout=0.5), scribe_id)
