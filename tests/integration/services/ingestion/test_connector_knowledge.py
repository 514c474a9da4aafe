"""Notion, Confluence and Zendesk bound to knowledge bases, through their protocol fakes
(each driven by its SDK or its documented shapes in ``tests/.../connectors``), on real
PostgreSQL and Redis: what lands, what changes, what is removed and only when proven, and
the failures (401, 404, 429/529 with Retry-After, a truncated page). Notion documents follow
their base's refresh schedule, with the exponential backoff of URL documents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from services.app.bootstrap import Platform
from services.ingestion.ticks import SweepBounds, connector_sync_requests
from shared.db.base import utcnow
from shared.db.models import KbConnectorItem
from shared.errors import Delay, Retryable, Unrecoverable
from testkit.fakes.confluence_server import ConfluenceServer
from testkit.fakes.notion_server import NotionServer, paragraph, text
from testkit.fakes.zendesk_help_center import sample_help_center
from testkit.fakes.zendesk_server import API_TOKEN, EMAIL, FakeZendesk, Kind
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.connector_factories import KEY, Bound, bind
from tiers.options import CHECKPOINT

NOTION_TOKEN = "secret_notion"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(connector_credentials_key=KEY)


@pytest.fixture
def notion() -> Iterator[NotionServer]:
    server = NotionServer(NOTION_TOKEN, max_page_size=2)
    with server:
        yield server


def notion_bound(platform: Platform, notion: NotionServer, **options: object) -> Bound:
    return bind(platform, "notion", notion.base_url, {"api_token": NOTION_TOKEN}, **options)  # type: ignore[arg-type]


def test_notion_pages_land_and_only_proven_removals_remove(
    platform: Platform, notion: NotionServer
) -> None:
    # Given five shared pages, one of them a child page
    ids = [notion.add_page(f"Page {n}", [paragraph(text(f"Text of page {n}."))]) for n in range(4)]
    child = notion.add_page("Child", [paragraph(text("Nested."))], parent=ids[0])
    bound = notion_bound(platform, notion)
    # When the binding syncs: search is read two results at a time
    first = bound.sync()
    assert (first.landed, first.pages) == (5, 3)
    documents = bound.documents()
    assert documents["Page 2"].source_bytes == b"# Page 2\n\nText of page 2."
    assert documents["Page 2"].content_type == "text/markdown; charset=utf-8"
    bound.ingest_all()
    # Given a page search misses, a deleted page and an archived one
    notion.hide_from_search(ids[1])
    notion.remove_page(ids[2])
    notion.archive_page(ids[3])
    second = bound.sync()
    # Then only the two Notion proves gone are removed; the one search missed stays
    assert second.removed == 2
    assert set(bound.documents()) == {"Page 0", "Page 1", "Child"}
    assert notion.requests_to(f"/v1/pages/{ids[1]}")  # asked before being kept
    del child


def test_notion_root_pages_scope_the_binding(platform: Platform, notion: NotionServer) -> None:
    root = notion.add_page("Handbook", [paragraph(text("Root."))])
    notion.add_page("Holidays", [paragraph(text("August."))], parent=root)
    notion.add_page("Elsewhere", [paragraph(text("Not in the handbook."))])
    bound = notion_bound(platform, notion, settings={"root_page_ids": [root]})
    bound.sync()
    assert set(bound.documents()) == {"Handbook", "Holidays"}


def test_notion_overload_and_bad_token(platform: Platform, notion: NotionServer) -> None:
    notion.add_page("Page", [paragraph(text("x"))])
    bound = notion_bound(platform, notion)
    notion.fail("/v1/search", "529", retry_after=4)
    with pytest.raises(Delay) as raised:
        bound.sync()
    assert raised.value.reason == "overloaded" and raised.value.until - time.time() <= 5
    wrong = bind(platform, "notion", notion.base_url, {"api_token": "secret_revoked"})
    with pytest.raises(Unrecoverable):
        wrong.sync(final_attempt=False)
    assert "HTTP 401" in wrong.binding().last_error


def test_a_notion_document_follows_its_base_refresh_schedule(
    platform: Platform, notion: NotionServer
) -> None:
    page = notion.add_page("Runbook", [paragraph(text("Step one."))])
    bound = notion_bound(platform, notion, item_id=page, schedule="weekly")

    def due() -> bool:
        with platform.sessions() as session:
            requests = connector_sync_requests(session, SweepBounds(10_000, 10_000))
        return bound.binding_id in {r.params["binding_id"] for r in requests}

    # A new binding is due at once; its first sync lands the page
    assert due()
    assert bound.sync(scheduled=True).landed == 1
    bound.ingest_all()
    document = bound.documents()["Runbook"]
    assert not due()
    assert timedelta(days=6, hours=23) < document.next_refresh_at - utcnow() <= timedelta(days=7)
    # An edit is picked up by the next scheduled refresh, versioned as a refresh
    notion.append(page, [paragraph(text("Step two."))])
    assert bound.sync(scheduled=True).landed == 1
    assert bound.documents()["Runbook"].submission_cause == "refresh"
    # A failing refresh backs off: two weeks, then the one-week cap of URL refreshes
    notion.fail(f"/v1/pages/{page}", "500", times=10)
    for failures in (1, 2):
        with pytest.raises(Retryable):
            bound.sync(scheduled=True, final_attempt=True)
        document = bound.documents()["Runbook"]
        assert document.refresh_failures == failures
        wait = document.next_refresh_at - utcnow()
        assert timedelta(days=6, hours=23) < wait <= timedelta(days=7)  # weekly: capped


def test_a_failing_daily_notion_document_backs_off_exponentially(
    platform: Platform, notion: NotionServer
) -> None:
    page = notion.add_page("Daily", [paragraph(text("x"))])
    bound = notion_bound(platform, notion, item_id=page, schedule="daily")
    bound.sync()
    notion.fail(f"/v1/pages/{page}", "500", times=3)
    waits = []
    for _ in range(3):
        with pytest.raises(Retryable):
            bound.sync(scheduled=True, final_attempt=True)
        waits.append(round((bound.binding().next_sync_at - utcnow()) / timedelta(days=1)))
    assert waits == [2, 4, 7]
    # Back on its daily schedule after a success
    assert bound.sync(scheduled=True).finished
    binding = bound.binding()
    assert binding.sync_failures == 0
    assert timedelta(hours=23) < binding.next_sync_at - utcnow() <= timedelta(days=1)


@pytest.fixture
def confluence() -> Iterator[ConfluenceServer]:
    server = ConfluenceServer("bot@example.com", "confluence-token", max_limit=2)
    with server:
        yield server


def confluence_bound(platform: Platform, server: ConfluenceServer, **options: object) -> Bound:
    return bind(
        platform,
        "confluence",
        server.base_url,
        {"email": "bot@example.com", "api_token": "confluence-token"},
        connection_settings={"site": "acme"},
        **options,  # type: ignore[arg-type]
    )


def test_confluence_spaces_pages_edits_and_removals(
    platform: Platform, confluence: ConfluenceServer
) -> None:
    eng = confluence.add_space("ENG", "Engineering")
    ops = confluence.add_space("OPS", "Operations")
    pages = [confluence.add_page(eng, f"Design {n}", f"<p>Design note {n}.</p>") for n in range(3)]
    confluence.add_page(ops, "Oncall", "<p>Pager rota.</p>")
    bound = confluence_bound(platform, confluence, settings={"space_keys": ["ENG"]})
    first = bound.sync()
    assert first.landed == 3 and set(bound.documents()) == {"Design 0", "Design 1", "Design 2"}
    assert bound.documents()["Design 1"].source_bytes == b"# Design 1\n\nDesign note 1.\n"
    bound.ingest_all()
    # An edit lands again; a page moved to the trash is no longer listed: removed
    confluence.edit_page(pages[0], storage="<p>Design note 0, revised.</p>")
    confluence.pages[pages[2]]["status"] = "trashed"
    second = bound.sync()
    assert (second.landed, second.removed, second.unchanged) == (1, 1, 1)
    assert bound.documents()["Design 0"].source_bytes == b"# Design 0\n\nDesign note 0, revised.\n"
    # A truncated listing page removes nothing
    confluence.pages.pop(pages[1])
    confluence.fail(f"/wiki/api/v2/spaces/{eng}/pages", "truncated")
    with pytest.raises(Retryable):
        bound.sync()
    assert "Design 1" in bound.documents()


def test_a_confluence_page_binding_is_removed_on_404(
    platform: Platform, confluence: ConfluenceServer
) -> None:
    space = confluence.add_space("ENG", "Engineering")
    page = confluence.add_page(space, "Runbook", "<p>Steps.</p>")
    bound = confluence_bound(platform, confluence, item_id=page)
    assert bound.sync().landed == 1
    confluence.pages.pop(page)
    assert bound.sync().removed == 1 and bound.documents() == {}


@pytest.fixture
def zendesk() -> Iterator[FakeZendesk]:
    fake = FakeZendesk(sample_help_center(extra_articles=4), page_size=3)
    with fake:
        yield fake


def zendesk_bound(platform: Platform, fake: FakeZendesk, **options: object) -> Bound:
    return bind(
        platform,
        "zendesk",
        fake.base_url,
        {"email": EMAIL, "api_token": API_TOKEN},
        connection_settings={"subdomain": "acme"},
        **options,  # type: ignore[arg-type]
    )


def test_zendesk_published_translations_land_from_the_listing(
    platform: Platform, zendesk: FakeZendesk
) -> None:
    bound = zendesk_bound(platform, zendesk)
    outcome = bound.sync()
    names = set(bound.documents())
    # Every published translation, none of the drafts, no request per article
    assert outcome.landed == len(names) == 8
    assert {"Enable two-factor", "Activer la double authentification", "Change your email"} <= names
    assert "Unreleased pricing" not in names and "Changer votre e-mail" not in names
    assert not [r for r in zendesk.requests if "/articles/" in r]
    body = bound.documents()["Enable two-factor"].source_bytes or b""
    assert body.startswith(b"# Enable two-factor\n\n## Steps") and b"**Enable**" in body
    # An article deleted at Zendesk is removed by the next (complete) listing
    zendesk.help_centers[1].articles = [a for a in zendesk.help_centers[1].articles if a.id != 104]
    assert bound.sync().removed == 1 and "Article 104" not in bound.documents()


def test_zendesk_locales_fall_back_to_the_source_translation(
    platform: Platform, zendesk: FakeZendesk
) -> None:
    bound = zendesk_bound(platform, zendesk, settings={"locales": ["de"]})
    bound.sync()
    # No German translation exists: each published article stands in from its source locale
    names = set(bound.documents())
    assert len(names) == 7 and {"Enable two-factor", "Télécharger une facture"} <= names
    with platform.sessions() as session:
        items = session.scalars(
            select(KbConnectorItem.external_id).where(
                KbConnectorItem.binding_id == bound.binding_id
            )
        ).all()
    assert sorted(items) == sorted(f"{n}:de" for n in (100, 102, 103, 104, 105, 106, 107))


def test_zendesk_rate_limit_mid_listing_keeps_the_pages_read(
    platform: Platform, zendesk: FakeZendesk
) -> None:
    bound = zendesk_bound(platform, zendesk)
    zendesk.fail(
        "/api/v2/help_center/en-us/articles",
        Kind.RATE_LIMITED,
        page="later",
        times=1,
        retry_after=3,
    )
    with pytest.raises(Delay) as raised:
        bound.sync()
    landed = set(bound.documents())
    assert 0 < len(landed) < 8
    assert raised.value.carry[CHECKPOINT].startswith(f"{bound.binding_id}:")
    assert bound.binding().checkpoint is not None
    outcome = bound.sync()
    assert outcome.finished and len(bound.documents()) == 8
    assert outcome.removed == 0


def test_zendesk_bad_credentials(platform: Platform, zendesk: FakeZendesk) -> None:
    bound = bind(
        platform,
        "zendesk",
        zendesk.base_url,
        {"email": EMAIL, "api_token": "wrong"},
        connection_settings={"subdomain": "acme"},
    )
    with pytest.raises(Unrecoverable):
        bound.sync(final_attempt=False)
    assert bound.binding().sync_failures == 1
