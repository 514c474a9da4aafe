"""A base's refresh_schedule on real PostgreSQL, on a simulated clock (every step passes its
own ``now``): a weekly schedule is weekly although the platform's recrawl is daily, a failing
source backs off exponentially up to the week's cap, and a base without a schedule keeps the
daily recrawl."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import pipeline, store, url_refresh
from services.ingestion.store import documents_to_refresh
from services.ingestion.url_sources import refresh_interval_seconds
from services.web.fetch import PageFetch
from shared.db.models import KbDocument
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import Site

DAY = timedelta(days=1)
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # the simulated clock's start


def due(session: Session, now: datetime) -> set[int]:
    found = documents_to_refresh(
        session, now=now, recrawl_interval_seconds=86_400.0, limit=10_000, tenant_slice=10_000
    )
    return {d.document_id for d in found}


def url_document(
    session: Session, site: Site, fetch: PageFetch, schedule: str | None, path: str
) -> tuple[int, KbDocument]:
    org = new_org()
    site.page(path, "Page", "<p>Stable content.</p>")
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
    outcome = pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=added.document.id,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        now=T0,
        fetch=fetch,
    )
    session.commit()
    assert outcome.status == "ready", outcome.failure_reason
    return org, added.document


def refresh(session: Session, org: int, doc: KbDocument, fetch: PageFetch, now: datetime) -> str:
    outcome = url_refresh.refresh_document(
        session, organization_id=org, document_id=doc.id, fetch=fetch, now=now
    )
    session.commit()
    return outcome.result


def next_refresh(session: Session, org: int, doc: KbDocument) -> datetime | None:
    session.expire_all()
    return store.get_document(session, organization_id=org, document_id=doc.id).next_refresh_at


def test_the_schedule_wins_over_the_recrawl_interval_both_ways() -> None:
    assert refresh_interval_seconds("weekly", 86_400.0) == 7 * 86_400.0
    assert refresh_interval_seconds("hourly", 86_400.0) == 3600.0
    assert refresh_interval_seconds(None, 86_400.0) == 86_400.0


def test_a_weekly_base_is_refreshed_weekly_not_at_the_daily_recrawl(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    org, doc = url_document(session, site, fetch, "weekly", "/weekly")
    assert next_refresh(session, org, doc) == T0 + 7 * DAY

    for day in range(1, 7):  # the daily recrawl would have taken it on each of these days
        assert doc.id not in due(session, T0 + day * DAY + timedelta(seconds=1))
    assert doc.id in due(session, T0 + 7 * DAY)

    t1 = T0 + 7 * DAY
    assert refresh(session, org, doc, fetch, t1) == "unchanged"
    assert next_refresh(session, org, doc) == t1 + 7 * DAY
    assert doc.id not in due(session, t1 + 6 * DAY)
    assert doc.id in due(session, t1 + 7 * DAY)


def test_a_base_without_a_schedule_keeps_the_daily_recrawl(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    _org, doc = url_document(session, site, fetch, None, "/unscheduled")

    assert doc.id not in due(session, T0 + DAY - timedelta(seconds=1))
    assert doc.id in due(session, T0 + DAY)


def test_a_failing_source_backs_off_exponentially_to_the_week_then_recovers(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    org, doc = url_document(session, site, fetch, "daily", "/flaky")
    site.answer("/flaky", 503, {"Content-Type": "text/plain"}, b"down")

    now, waits = T0 + DAY, []
    for _ in range(4):
        assert doc.id in due(session, now)
        assert refresh(session, org, doc, fetch, now) == "failed"
        following = next_refresh(session, org, doc)
        assert following is not None
        waits.append(following - now)
        assert doc.id not in due(session, following - timedelta(seconds=1))  # no daily recrawl
        now = following

    assert waits == [2 * DAY, 4 * DAY, 7 * DAY, 7 * DAY]  # daily * 2**n, capped at a week

    site.page("/flaky", "Page", "<p>Stable content.</p>")
    assert refresh(session, org, doc, fetch, now) == "unchanged"
    assert next_refresh(session, org, doc) == now + DAY
    session.expire_all()
    recovered = store.get_document(session, organization_id=org, document_id=doc.id)
    assert recovered.refresh_failures == 0


def test_a_weekly_base_switched_to_hourly_is_due_within_the_hour(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    org, doc = url_document(session, site, fetch, "weekly", "/switched")
    base_id = doc.knowledge_base_id

    store.set_refresh_schedule(
        session,
        organization_id=org,
        knowledge_base_id=base_id,
        refresh_schedule="hourly",
        recrawl_interval_seconds=86_400.0,
        now=T0 + timedelta(minutes=10),
    )
    session.commit()

    assert next_refresh(session, org, doc) == T0 + timedelta(hours=1)
    assert doc.id in due(session, T0 + timedelta(hours=1))
