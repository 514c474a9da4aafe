"""Every version records the path that made it current (real PostgreSQL): an upload, a
re-upload, a rollback, the platform's recrawl, a base's scheduled refresh, a feed read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import feeds, pipeline, rollback, store, url_refresh
from services.web.fetch import PageFetch
from tests.integration.services.ingestion.factories import new_org, new_text_document
from tests.integration.services.ingestion.pipeline_support import Site

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def ingest(session: Session, org: int, document_id: int, now: datetime, fetch: PageFetch) -> None:
    outcome = pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=document_id,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        now=now,
        fetch=fetch,
    )
    session.commit()
    assert outcome.status == "ready", outcome.failure_reason


def causes(session: Session, org: int, document_id: int) -> list[tuple[int, str | None]]:
    """(version, cause), oldest first."""
    kept = store.list_versions(session, organization_id=org, document_id=document_id)
    return sorted((v.version, v.cause) for v in kept)


def test_upload_reupload_and_rollback(session: Session, fetch: PageFetch) -> None:
    org = new_org()
    base = store.create_knowledge_base(session, organization_id=org, name="Docs")

    def add(text: str) -> int:
        added = store.add_document(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            name="Guide",
            source=store.TextSource(text),
        )
        session.commit()
        return added.document.id

    document_id = add("First text.")
    ingest(session, org, document_id, T0, fetch)
    add("Second text.")
    ingest(session, org, document_id, T0, fetch)
    assert rollback.request_rollback(
        session,
        organization_id=org,
        document_id=document_id,
        version=1,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        now=T0,
    )
    session.commit()
    ingest(session, org, document_id, T0, fetch)
    assert causes(session, org, document_id) == [(1, "upload"), (2, "upload"), (3, "rollback")]


def test_a_retry_keeps_the_cause_of_the_bytes_it_reruns(session: Session, fetch: PageFetch) -> None:
    org = new_org()
    document_id = new_text_document(session, org, "Notes", "Some notes.")
    session.commit()
    store.mark_for_retry(session, organization_id=org, document_id=document_id)
    session.commit()
    ingest(session, org, document_id, T0, fetch)
    assert causes(session, org, document_id) == [(1, "upload")]


@pytest.mark.parametrize(("schedule", "cause"), [(None, "recrawl"), ("weekly", "refresh")])
def test_a_changed_page_is_a_recrawl_or_a_scheduled_refresh(
    session: Session, site: Site, fetch: PageFetch, schedule: str | None, cause: str
) -> None:
    # Given a ready URL document in a base with or without a refresh schedule
    org = new_org()
    path = f"/cause-{schedule}-{org}"
    site.page(path, "Page", "<p>Before.</p>")
    base = store.create_knowledge_base(
        session, organization_id=org, name="Docs", refresh_schedule=schedule
    )
    added = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name=path,
        source=store.UrlSource(site.url(path)),
    )
    session.commit()
    ingest(session, org, added.document.id, T0, fetch)
    # When the page changes and the refresh re-fetches it
    site.page(path, "Page", "<p>After the change.</p>")
    later = T0 + timedelta(days=8)
    outcome = url_refresh.refresh_document(
        session, organization_id=org, document_id=added.document.id, fetch=fetch, now=later
    )
    session.commit()
    assert outcome.result == "changed"
    ingest(session, org, added.document.id, later, fetch)
    # Then the new version says which machine replaced the page
    assert causes(session, org, added.document.id) == [(1, "upload"), (2, cause)]


def test_feed_entries_are_versioned_as_feed_reads(session: Session, fetch: PageFetch) -> None:
    org = new_org()
    base = store.create_knowledge_base(session, organization_id=org, name="News")
    entry = feeds.FeedEntry("urn:1", "Launch", "https://example.com/1", "# Launch\n\nWe shipped.")
    synced = feeds.sync_entries(
        session, organization_id=org, knowledge_base_id=base.id, entries=[entry], now=T0
    )
    session.commit()
    (document_id,) = synced.added
    ingest(session, org, document_id, T0, fetch)
    assert causes(session, org, document_id) == [(1, "feed")]
