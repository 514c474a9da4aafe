"""ScribeProvider against a local server that speaks the protocol its module documents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from services.connectors import scribe
from services.connectors.base import SourceConfig
from services.connectors.scribe import (
    ScribeProvider,
    SessionTokenSource,
    uses_session_token,
)
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.protocol_server import TRANSIENT_FAILURES
from testkit.fakes.scribe_server import LIST_PATH, ScribeServer, step

KEY = "scribe-key"


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


# -- listing ------------------------------------------------------------------------------


def test_listing_pages_by_offset_until_the_total(
    server: ScribeServer, config: SourceConfig
) -> None:
    ids = [server.add_scribe(f"How to {n}") for n in range(45)]

    listing = provider.list_source(config)

    assert listing.complete
    assert [d.identifier for d in listing.documents] == ids
    assert offsets(server) == [0, 7, 14, 21, 28, 35, 42]  # the server caps limit at 7
    assert {r.param("limit") for r in server.requests_to(LIST_PATH)} == {"100"}
    first = listing.documents[0]
    assert first.title == "How to 0" and first.url and first.url.endswith(ids[0])
    assert first.updated_at is not None and first.content is None
    assert all(r.headers["x-api-key"] == KEY for r in server.requests)


@pytest.mark.parametrize(("count", "pages"), [(23, 5), (25, 6)])
def test_without_a_total_a_short_page_ends_the_listing(
    monkeypatch: pytest.MonkeyPatch, count: int, pages: int
) -> None:
    monkeypatch.setattr(scribe, "PAGE_LIMIT", 5)
    fake = ScribeServer(KEY, include_total=False)
    with fake as base_url:
        ids = [fake.add_scribe(f"S{n}") for n in range(count)]

        listing = provider.list_source(SourceConfig(1, 1, "scribe", base_url, {"api_key": KEY}))

        assert [d.identifier for d in listing.documents] == ids
        assert listing.complete
        assert len(fake.requests_to(LIST_PATH)) == pages


def test_a_list_that_shifts_while_paging_is_incomplete(
    server: ScribeServer, config: SourceConfig
) -> None:
    ids = [server.add_scribe(f"S{n}") for n in range(20)]
    server.on_list(lambda offset: server.remove_scribe(ids[0]) if offset == 0 else None)

    listing = provider.list_source(config)

    assert not listing.complete  # ids[7] slid into the first page and was never seen
    assert ids[7] not in {d.identifier for d in listing.documents}


def test_an_empty_account_lists_nothing_completely(
    server: ScribeServer, config: SourceConfig
) -> None:
    listing = provider.list_source(config)

    assert listing.documents == [] and listing.complete


# -- documents ----------------------------------------------------------------------------


def test_steps_render_as_a_numbered_list_with_screenshots(
    server: ScribeServer, config: SourceConfig
) -> None:
    scribe_id = server.add_scribe(
        "Reset a password",
        [
            step("Open **Settings**", "https://img.example.com/1.png"),
            step("Account", kind="heading"),
            step("Click Reset\nthen confirm", "https://img.example.com/2.png"),
            step("Admins only", kind="tip"),
            step("Done"),
        ],
        description="For support agents.",
    )

    document = provider.fetch_document(config, scribe_id)

    assert document is not None
    assert document.title == "Reset a password"
    assert document.url == server.scribes[scribe_id]["url"]
    assert document.updated_at is not None
    assert document.content == (
        "For support agents.\n\n"
        "1. Open **Settings**\n\n"
        "   ![Step 1](https://img.example.com/1.png)\n\n"
        "## Account\n\n"
        "2. Click Reset\n"
        "   then confirm\n\n"
        "   ![Step 2](https://img.example.com/2.png)\n\n"
        "> **Tip:** Admins only\n\n"
        "3. Done"
    )


def test_steps_follow_their_position(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Ordered", [step("B"), step("A")])
    server.scribes[scribe_id]["steps"][0]["position"] = 5

    document = provider.fetch_document(config, scribe_id)

    assert document is not None and document.content == "1. A\n\n2. B"


def test_a_missing_scribe_is_none(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Gone")
    server.remove_scribe(scribe_id)

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


def test_retry_after_becomes_a_delay_until_then(server: ScribeServer, config: SourceConfig) -> None:
    scribe_id = server.add_scribe("Busy")
    server.fail(f"{LIST_PATH}/{scribe_id}", "429", retry_after=60)

    with pytest.raises(Delay) as raised:
        provider.fetch_document(config, scribe_id)

    assert raised.value.until == pytest.approx(time.time() + 60, abs=3)


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
def test_a_failed_scribe_fetch_raises(
    server: ScribeServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    scribe_id = server.add_scribe("Flaky", [step("One")])
    server.fail(f"{LIST_PATH}/{scribe_id}", kind, **options)

    with pytest.raises(error):
        provider.fetch_document(replace(config, timeout=0.5), scribe_id)
