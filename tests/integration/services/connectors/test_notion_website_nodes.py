"""The Notion and Website adapters: the knowledge-sync Notion client and the web kernel's
fetcher behind the node contract, against the Notion fake and a real local website."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from services.connectors import notion_nodes, website
from services.connectors.nodes import Connection, NodeRef, WalkPage
from shared.egress.addresses import address_guard, default_guard, set_default_guard
from shared.errors import Delay, Retryable, Unrecoverable
from shared.http import NotFound
from testkit.fakes.notion_server import NotionServer, heading, paragraph
from testkit.fakes.website import FakeWebsite

TOKEN = "secret_notion"


@pytest.fixture
def notion() -> Iterator[NotionServer]:
    fake = NotionServer(TOKEN, max_page_size=3)
    with fake:
        yield fake


def notion_conn(server: NotionServer, **settings: object) -> Connection:
    return Connection(
        source="notion",
        connection_id=51,
        organization_id=3,
        base_url=server.base_url,
        credentials={"api_token": TOKEN},
        settings=settings,
        timeout=2.0,
    )


def walk_all(source: object, conn: Connection, root: NodeRef) -> list[WalkPage]:
    pages: list[WalkPage] = []
    checkpoint: str | None = None
    while True:
        page = source.walk(conn, root, checkpoint)  # type: ignore[attr-defined]
        pages.append(page)
        checkpoint = page.checkpoint
        if checkpoint is None:
            return pages


def test_notion_walks_the_pages_under_a_root_page_or_database(notion: NotionServer) -> None:
    root = notion.add_page("Handbook", [heading(1, "Welcome"), paragraph("Read me.")])
    children = [notion.add_page(f"Chapter {n}", parent=root) for n in range(5)]
    database = notion.add_database("Runbooks", parent=root)
    rows = [notion.add_page(f"Runbook {n}", database=database) for n in range(2)]
    notion.add_page("Elsewhere")
    conn = notion_conn(notion, page_size=3)

    pages = walk_all(notion_nodes.SOURCE, conn, NodeRef("NotionPage", root))
    refs = [r for p in pages for r in p.refs]
    assert len(pages) == 3
    assert {r.node_id for r in refs} == {root, *children, *rows}
    assert all(r.node_type == "NotionPage" for r in refs)
    assert all(r in p.dates for p in pages for r in p.refs)

    under_db = walk_all(notion_nodes.SOURCE, conn, NodeRef("NotionDatabase", database))
    assert {r.node_id for p in under_db for r in p.refs} == set(rows)


def test_notion_fetch_renders_markdown_and_says_gone(notion: NotionServer) -> None:
    page = notion.add_page("Handbook", [heading(1, "Welcome"), paragraph("Read me.")])
    conn = notion_conn(notion)
    node = notion_nodes.SOURCE.fetch(conn, NodeRef("NotionPage", page))
    assert node is not None
    assert node.title == "Handbook"
    assert "# Welcome" in node.text and "Read me." in node.text
    assert node.synchronization_date.tzinfo is not None
    notion.archive_page(page)
    assert notion_nodes.SOURCE.fetch(conn, NodeRef("NotionPage", page)) is None
    assert notion_nodes.SOURCE.fetch(conn, NodeRef("NotionPage", "0" * 32)) is None


def test_notion_failures_keep_their_meaning(notion: NotionServer) -> None:
    root = notion.add_page("Root")
    conn = notion_conn(notion)
    with pytest.raises(Unrecoverable, match="401"):
        notion_nodes.SOURCE.walk(
            replace(conn, credentials={"api_token": "wrong"}), NodeRef("NotionPage", root), None
        )
    notion.fail("/v1/search", "429", retry_after=30)
    with pytest.raises(Delay):
        notion_nodes.SOURCE.walk(conn, NodeRef("NotionPage", root), None)
    notion.fail("/v1/search", "500")
    with pytest.raises(Retryable):
        notion_nodes.SOURCE.walk(conn, NodeRef("NotionPage", root), None)
    assert [r.node_id for r in notion_nodes.SOURCE.list_roots(conn)] == [root]


# -- website -------------------------------------------------------------------------------


@contextmanager
def egress_strict() -> Iterator[None]:
    """The process's guard as production runs it: no private address at all."""
    before = default_guard()
    set_default_guard(address_guard(False))
    try:
        yield
    finally:
        set_default_guard(before)


def site_conn(**settings: object) -> Connection:
    return Connection(
        source="website",
        connection_id=61,
        organization_id=3,
        base_url="",
        credentials={},
        settings=settings,
        timeout=2.0,
    )


def test_website_walks_same_host_pages_within_limits() -> None:
    with FakeWebsite(pages=40) as site:
        root = NodeRef("WebsiteRoot", site.url("/page/0"))
        pages = walk_all(website.SOURCE, site_conn(max_pages=12, pages_per_step=5), root)
        urls = [r.node_id for p in pages for r in p.refs]
        assert len(urls) == len(set(urls)) <= 12
        assert urls[0] == site.url("/page/0")
        assert all(u.startswith(site.base_url) for u in urls)
        assert not any("/private/" in u for u in urls)  # robots.txt
        assert not site.requested("/private/")
        assert len(pages) >= 3

        shallow = walk_all(website.SOURCE, site_conn(max_depth=1), root)
        found = {r.node_id for p in shallow for r in p.refs}
        assert {site.url("/page/0"), site.url("/page/1"), site.url("/page/2")} <= found
        assert not {site.url("/page/5"), site.url("/page/6")} & found  # page 2's children


def test_website_fetch_and_failures() -> None:
    with FakeWebsite(pages=5) as site:
        conn = site_conn()
        node = website.SOURCE.fetch(conn, NodeRef("WebsitePage", site.url("/page/1")))
        assert node is not None and node.url == site.url("/page/1") and node.text
        assert website.SOURCE.fetch(conn, NodeRef("WebsitePage", site.url("/missing"))) is None
        assert website.SOURCE.fetch(conn, NodeRef("WebsitePage", site.url("/private/x"))) is None
        with pytest.raises(Retryable):
            website.SOURCE.fetch(conn, NodeRef("WebsitePage", site.url("/error")))
        with pytest.raises(Delay):
            website.SOURCE.fetch(conn, NodeRef("WebsitePage", site.url("/rate-limited")))
        with pytest.raises(NotFound):
            website.SOURCE.walk(conn, NodeRef("WebsiteRoot", site.url("/missing")), None)
        with egress_strict(), pytest.raises(Unrecoverable, match="refused"):
            # a connection setting cannot open private networks: only the operator's guard
            website.SOURCE.walk(
                site_conn(allow_private_networks=True),
                NodeRef("WebsiteRoot", site.url("/page/0")),
                None,
            )
        assert website.SOURCE.list_roots(site_conn(urls=[site.url("/page/0"), "mailto:x@y"])) == [
            NodeRef("WebsiteRoot", site.url("/page/0"))
        ]
