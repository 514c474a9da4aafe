"""RSS and Atom feeds into a knowledge base (services.ingestion.feeds) on real PostgreSQL,
fetched from a local feed server through the SSRF-guarded feed fetcher and parsed by
feedparser: RSS 2.0 and Atom 1.0 samples, entry identity across syncs, a malformed feed, a
404, a 429 with Retry-After, and the guard refusing a loopback address."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from sqlalchemy.orm import Session

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import feeds, pipeline, store
from services.web.feed_fetch import FeedFetch, feed_fetcher
from shared.db.base import utcnow
from shared.egress.addresses import AddressRefused
from shared.errors import Delay, Unrecoverable
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import Site

RSS_TYPE = {"Content-Type": "application/rss+xml; charset=utf-8"}
ATOM_TYPE = {"Content-Type": "application/atom+xml; charset=utf-8"}


def rss(*items: tuple[str, str, str]) -> bytes:
    """An RSS 2.0 channel of (guid, title, HTML description) items."""
    body = "".join(
        f"<item><guid isPermaLink='false'>{guid}</guid><title>{title}</title>"
        f"<link>https://blog.example.com/{guid}</link>"
        f"<description><![CDATA[{html}]]></description></item>"
        for guid, title, html in items
    )
    return (
        "<?xml version='1.0' encoding='utf-8'?><rss version='2.0'><channel>"
        "<title>Release notes</title><link>https://blog.example.com/</link>"
        f"<description>What shipped</description>{body}</channel></rss>"
    ).encode()


ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>Status page</title>
  <id>urn:uuid:60a76c80-d399-11d9-b93C-0003939e0af6</id>
  <updated>2026-03-02T09:00:00Z</updated>
  <entry>
    <title>Walrus region maintenance</title>
    <id>urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6a</id>
    <link href="https://status.example.com/incidents/1"/>
    <updated>2026-03-02T09:00:00Z</updated>
    <content type="html">&lt;p&gt;The &lt;b&gt;narwhal&lt;/b&gt; cluster
      restarts at noon.&lt;/p&gt;</content>
  </entry>
</feed>
"""


@pytest.fixture
def fetch() -> FeedFetch:
    return feed_fetcher(allow_private=True, timeout=5)


def base_of(session: Session) -> tuple[int, int]:
    org = new_org()
    base = store.create_knowledge_base(session, organization_id=org, name="Feeds")
    session.commit()
    return org, base.id


def sync(session: Session, org: int, base: int, url: str, fetch: FeedFetch) -> feeds.FeedSync:
    result = feeds.sync_feed(
        session,
        organization_id=org,
        knowledge_base_id=base,
        feed_url=url,
        fetch=fetch,
        now=utcnow(),
    )
    session.commit()
    return result


def ingest_all(session: Session, org: int, ids: list[int]) -> None:
    for document_id in ids:
        outcome = pipeline.ingest_document(
            session,
            organization_id=org,
            document_id=document_id,
            chunker=Chunker(),
            embedder=HashingEmbedder(),
            now=utcnow(),
        )
        session.commit()
        assert outcome.status == "ready", outcome.failure_reason


def test_rss_items_become_documents_and_refresh_by_guid(
    session: Session, site: Site, fetch: FeedFetch
) -> None:
    org, base = base_of(session)
    site.answer(
        "/rss",
        200,
        RSS_TYPE,
        rss(
            ("r-1", "Version 1.0", "<p>First <em>walrus</em> release.</p>"),
            ("r-2", "Version 1.1", "Fixes."),
        ),
    )

    first = sync(session, org, base, site.url("/rss"), fetch)

    assert len(first.added) == 2 and first.changed == first.unchanged == []
    names = {
        d.name: d
        for d in store.list_documents(session, organization_id=org, knowledge_base_id=base)
    }
    assert set(names) == {"rss:r-1", "rss:r-2"}
    assert names["rss:r-1"].connector == feeds.RSS_CONNECTOR
    ingest_all(session, org, first.added)
    text = store.read_source(session, organization_id=org, document_id=names["rss:r-1"].id)
    assert text is not None and b"# Version 1.0" in text and b"walrus" in text

    # Unchanged entries are left alone; a retitled entry keeps its document (same guid).
    again = sync(session, org, base, site.url("/rss"), fetch)
    assert sorted(again.unchanged) == sorted(first.added) and again.added == again.changed == []
    site.answer(
        "/rss",
        200,
        RSS_TYPE,
        rss(
            ("r-3", "Version 1.2", "New narwhal API."),
            ("r-1", "Version 1.0 (revised)", "<p>First walrus release, revised.</p>"),
            ("r-2", "Version 1.1", "Fixes."),
        ),
    )
    third = sync(session, org, base, site.url("/rss"), fetch)
    assert third.changed == [names["rss:r-1"].id]
    assert len(third.added) == 1 and third.unchanged == [names["rss:r-2"].id]
    session.expire_all()
    revised = store.get_document(session, organization_id=org, document_id=names["rss:r-1"].id)
    assert revised.status == "processing"
    ingest_all(session, org, [revised.id])
    assert (
        store.get_document(session, organization_id=org, document_id=revised.id).current_version
        == 2
    )


def test_an_atom_entry_is_a_document_with_its_html_content_as_markdown(
    session: Session, site: Site, fetch: FeedFetch
) -> None:
    org, base = base_of(session)
    site.answer("/atom", 200, ATOM_TYPE, ATOM)

    result = sync(session, org, base, site.url("/atom"), fetch)

    assert len(result.added) == 1
    document = store.get_document(session, organization_id=org, document_id=result.added[0])
    assert document.name == "rss:urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6a"
    text = (
        store.read_source(session, organization_id=org, document_id=document.id) or b""
    ).decode()
    assert text.startswith("# Walrus region maintenance\n\nhttps://status.example.com/incidents/1")
    assert "**narwhal**" in text and "<b>" not in text


@pytest.mark.parametrize(
    "body",
    [
        b"<rss version='2.0'><channel><item><title>cut",
        b"<html><body>Not a feed</body></html>",
        b"\x00\xff",
    ],
    ids=["truncated", "html-page", "binary"],
)
def test_a_malformed_feed_is_unreadable_and_adds_nothing(
    session: Session, site: Site, fetch: FeedFetch, body: bytes
) -> None:
    org, base = base_of(session)
    site.answer("/broken", 200, RSS_TYPE, body)

    with pytest.raises(feeds.FeedUnreadable, match="unreadable feed"):
        sync(session, org, base, site.url("/broken"), fetch)
    assert store.list_documents(session, organization_id=org, knowledge_base_id=base) == []


def test_a_missing_feed_is_unrecoverable(session: Session, site: Site, fetch: FeedFetch) -> None:
    org, base = base_of(session)

    with pytest.raises(Unrecoverable, match="404"):
        sync(session, org, base, site.url("/no-such-feed"), fetch)


def test_a_429_with_retry_after_is_a_delay(session: Session, site: Site, fetch: FeedFetch) -> None:
    org, base = base_of(session)
    site.answer("/busy", 429, {"Retry-After": "120", "Content-Type": "text/plain"}, b"slow down")

    with pytest.raises(Delay) as delayed:
        sync(session, org, base, site.url("/busy"), fetch)
    assert 110 <= delayed.value.until - time.time() <= 121


def test_the_ssrf_guard_refuses_a_loopback_feed(session: Session, site: Site) -> None:
    org, base = base_of(session)
    site.answer("/rss-private", 200, RSS_TYPE, rss(("x", "X", "x")))

    with pytest.raises(AddressRefused):
        sync(
            session,
            org,
            base,
            site.url("/rss-private"),
            feed_fetcher(allow_private=False, timeout=5),
        )
    assert store.list_documents(session, organization_id=org, knowledge_base_id=base) == []


# -- a feed subscribed as a URL document bound to the rss connector ---------------------------


def test_a_feed_document_ingests_its_entries_and_its_refresh_follows_the_feed(
    session: Session, site: Site, fetch: FeedFetch
) -> None:
    from datetime import timedelta

    from services.ingestion import url_refresh
    from services.ingestion.store import documents_to_refresh
    from services.web.fetch import page_fetcher

    org = new_org()
    base = store.create_knowledge_base(
        session, organization_id=org, name="Feeds", refresh_schedule="weekly"
    )
    site.answer("/subscribed", 200, RSS_TYPE, rss(("s-1", "Launch", "Walrus launch notes.")))
    feed_doc = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name="Release feed",
        source=store.UrlSource(site.url("/subscribed")),
        connector=feeds.RSS_CONNECTOR,
        audience=["staff"],
    ).document
    session.commit()
    t0 = utcnow()

    outcome = pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=feed_doc.id,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        now=t0,
        fetch_feed=fetch,
    )
    session.commit()

    assert outcome.status == "ready", outcome.failure_reason
    listed = store.list_documents(session, organization_id=org, knowledge_base_id=base.id)
    entry = next(d for d in listed if d.name == "rss:s-1")
    assert (entry.status, entry.connector, entry.audience) == ("processing", "rss", ["staff"])
    index = store.read_source(session, organization_id=org, document_id=feed_doc.id) or b""
    assert b"- [Launch](https://blog.example.com/s-1)" in index
    ingest_all(session, org, [entry.id])

    def due(now: datetime) -> set[int]:
        found = documents_to_refresh(
            session, now=now, recrawl_interval_seconds=86_400.0, limit=100, tenant_slice=100
        )
        return {d.document_id for d in found}

    assert feed_doc.id not in due(t0 + timedelta(days=6))  # weekly, not the daily recrawl
    assert feed_doc.id in due(t0 + timedelta(days=7))

    site.answer(
        "/subscribed",
        200,
        RSS_TYPE,
        rss(("s-2", "Patch", "Narwhal patch."), ("s-1", "Launch", "Walrus launch notes.")),
    )
    refreshed = url_refresh.refresh_document(
        session,
        organization_id=org,
        document_id=feed_doc.id,
        fetch=page_fetcher(allow_private=True, timeout=5),
        now=t0 + timedelta(days=7),
        fetch_feed=fetch,
    )
    session.commit()

    assert refreshed.result == "changed"
    names = {
        d.name: d.status
        for d in store.list_documents(session, organization_id=org, knowledge_base_id=base.id)
    }
    assert names == {"Release feed": "processing", "rss:s-1": "ready", "rss:s-2": "processing"}

    # A feed that answers 404 later: the refresh fails, backs off, and the entries stay.
    site.answer("/subscribed", 404, {"Content-Type": "text/plain"}, b"gone")
    ingest_all(session, org, [feed_doc.id])
    failed = url_refresh.refresh_document(
        session,
        organization_id=org,
        document_id=feed_doc.id,
        fetch=page_fetcher(allow_private=True, timeout=5),
        now=t0 + timedelta(days=14),
        fetch_feed=fetch,
    )
    session.commit()
    assert failed.result == "failed"
