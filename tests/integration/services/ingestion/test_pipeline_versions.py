"""Ingestion's replacements against real PostgreSQL: the unchanged short-circuit,
concurrent ingestions, versioning and rollback, and recrawl and refresh."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.indexing import chunk_batches
from services.indexing.embedders import HashingEmbedder
from services.ingestion import pipeline, store, url_refresh
from services.ingestion.rollback import request_rollback
from services.ingestion.store import documents_to_refresh
from services.web.failures import UNREACHABLE
from services.web.fetch import PageFetch
from shared.db.models import (
    KbDocument,
    KbDocumentVersion,
    UsageEvent,
)
from shared.errors import RecordMissing
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import (
    CHUNKER,
    DAY,
    CountingEmbedder,
    Site,
    add,
    chunk_rows,
    document,
    ingest,
    make_base,
    pipeline_text,
    run,
    utc_now,
    words,
)

# -- idempotence ---------------------------------------------------------------------------


def test_unchanged_content_makes_no_embedding_call(any_session: Session) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "faq", store.TextSource(words("faq")))
    ingest(session, org, doc)
    before = chunk_rows(session, org, doc.id)
    chunk_ids = [c.id for c in store.list_chunks(session, organization_id=org, document_id=doc.id)]

    # When the same content is uploaded again under the same name (new audience only)
    again = add(session, org, base, "faq", store.TextSource(words("faq")), audience=["agents"])
    assert again.id == doc.id and again.status == "processing"
    embedder = CountingEmbedder()
    outcome = ingest(session, org, doc, embedder)

    # Then nothing is embedded, the chunk set is kept (its audience follows) and no version
    assert embedder.calls == 0 and outcome.unchanged and outcome.status == "ready"
    chunks = store.list_chunks(session, organization_id=org, document_id=doc.id)
    assert [c.id for c in chunks] == chunk_ids and chunk_rows(session, org, doc.id) == before
    assert all(c.audience == ["agents"] for c in chunks)
    assert document(session, org, doc.id).current_version == 1


def test_three_concurrent_ingestions_leave_one_chunk_set(
    committed: tuple[sessionmaker[Session], set[int]],
) -> None:
    factory, organizations = committed
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), "c", store.TextSource(words("c", 400)))
    # Every run embeds before any takes the lock: all three really race for the write.
    embedder = CountingEmbedder(barrier=threading.Barrier(3))
    outcomes: list[pipeline.IngestOutcome] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            outcomes.append(run(factory, org, doc.id, embedder, final=False))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == [] and embedder.calls == 3
    expected = len(CHUNKER.split(pipeline_text(words("c", 400))))
    with factory() as session:
        rows = chunk_rows(session, org, doc.id)
        assert [position for position, _, _ in rows] == list(range(expected))
        assert document(session, org, doc.id).current_version == 1
        versions = session.scalar(
            select(func.count()).where(KbDocumentVersion.document_id == doc.id)
        )
        events = session.scalar(select(func.count()).where(UsageEvent.organization_id == org))
    assert (versions, events) == (1, 1)
    assert sorted(o.unchanged for o in outcomes) == [False, True, True]


def test_a_document_of_many_batches_is_replaced_whole_and_readers_never_see_half(
    committed: tuple[sessionmaker[Session], set[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    factory, organizations = committed
    org = new_org()
    organizations.add(org)
    # Small batches stand in for a large file: several embedder calls.
    monkeypatch.setattr(chunk_batches, "EMBED_BATCH_TEXTS", 8)
    with factory() as session:
        base = make_base(session, org)
        doc = add(session, org, base, "m", store.TextSource(words("m1", 400)))
    run(factory, org, doc.id, CountingEmbedder(), final=False)
    with factory() as session:
        old = chunk_rows(session, org, doc.id)
        again = add(session, org, base, "m", store.TextSource(words("m2", 400)))
    assert again.id == doc.id and again.status == "processing"

    # When, while the new chunk set is copied in (rows 1, 11 and 21 of the COPY), another
    # connection reads the document's
    seen: list[list[str]] = []
    write_row = psycopg.Copy.write_row
    rows_written = 0

    def look(copy: psycopg.Copy, row: Sequence[Any]) -> None:
        nonlocal rows_written
        write_row(copy, row)
        rows_written += 1
        if rows_written % 10 == 1 and len(seen) < 3:
            with factory() as reader:
                seen.append([content for _, content, _ in chunk_rows(reader, org, doc.id)])

    monkeypatch.setattr(psycopg.Copy, "write_row", look)
    embedder = CountingEmbedder()
    outcome = run(factory, org, doc.id, embedder, final=False)

    expected = CHUNKER.split(pipeline_text(words("m2", 400)))
    assert len(expected) > 20 and embedder.calls == -(-len(expected) // 8)
    assert outcome.chunk_count == len(expected) and embedder.texts == len(expected)
    # Then every reader mid-write saw the whole old chunk set, and the new one is whole
    assert len(seen) == 3 and all(contents == [c for _, c, _ in old] for contents in seen)
    with factory() as session:
        rows = chunk_rows(session, org, doc.id)
    assert [(p, c) for p, c, _ in rows] == [(c.position, c.content) for c in expected]
    assert [e for _, _, e in rows] == [
        pytest.approx(v, abs=1e-6) for v in HashingEmbedder().embed([c.content for c in expected])
    ]


# -- versioning ----------------------------------------------------------------------------


def test_eleven_replacements_keep_ten_versions_and_rollback_restores_the_old_chunks(
    any_session: Session,
) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "handbook", store.TextSource(words("v1")))
    ingest(session, org, doc)
    chunks_of = {1: chunk_rows(session, org, doc.id)}
    for version in range(2, 13):  # eleven replacements
        add(session, org, base, "handbook", store.TextSource(words(f"v{version}")))
        assert ingest(session, org, doc).version == version
        chunks_of[version] = chunk_rows(session, org, doc.id)

    versions = store.list_versions(session, organization_id=org, document_id=doc.id)
    assert [v.version for v in versions] == list(range(12, 1, -1))  # current + 10 superseded
    with pytest.raises(RecordMissing):
        store.get_version(session, organization_id=org, document_id=doc.id, version=1)
    assert store.get_version(
        session, organization_id=org, document_id=doc.id, version=2
    ).content == pipeline_text(words("v2"))

    # Rolling back to version 2 queues its content, and its ingestion restores exactly its
    # chunks, as a new current version
    assert rollback(session, org, doc.id, 2)
    session.commit()
    assert document(session, org, doc.id).status == "processing"
    assert chunk_rows(session, org, doc.id) == chunks_of[12]  # searchable meanwhile
    outcome = ingest(session, org, doc)
    assert (outcome.status, outcome.version) == ("ready", 13)
    assert chunk_rows(session, org, doc.id) == chunks_of[2]
    kept = [
        v.version for v in store.list_versions(session, organization_id=org, document_id=doc.id)
    ]
    assert kept == list(range(13, 2, -1))  # the replaced content (12) is kept as superseded

    # Rolling a ready document back to what is already current changes nothing
    assert not rollback(session, org, doc.id, 13)
    assert document(session, org, doc.id).status == "ready"

    # A document being ingested cannot be rolled back under the pipeline's feet
    store.mark_for_retry(session, organization_id=org, document_id=doc.id)
    with pytest.raises(store.DocumentBusy):
        rollback(session, org, doc.id, 12)


def rollback(session: Session, org: int, document_id: int, version: int) -> bool:
    return request_rollback(
        session,
        organization_id=org,
        document_id=document_id,
        version=version,
        chunker=CHUNKER,
        embedder=CountingEmbedder(),
        now=utc_now(),
    )


def test_a_failed_document_rolled_back_to_its_current_content_is_ready_with_no_embedding(
    any_session: Session,
) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "memo", store.TextSource(words("memo")))
    ingest(session, org, doc)
    before = chunk_rows(session, org, doc.id)
    add(session, org, base, "memo", store.FileSource(b"", "text/plain", "memo.txt"))
    assert ingest(session, org, doc).status == "failed"

    assert rollback(session, org, doc.id, 1)
    session.commit()
    embedder = CountingEmbedder()
    outcome = ingest(session, org, doc, embedder)

    assert (outcome.status, outcome.version, embedder.calls) == ("ready", 1, 0)
    assert chunk_rows(session, org, doc.id) == before


# -- recrawl and refresh -------------------------------------------------------------------


def _due(session: Session, now: datetime) -> set[int]:
    due = documents_to_refresh(
        session, now=now, recrawl_interval_seconds=DAY, limit=10_000, tenant_slice=10_000
    )
    return {d.document_id for d in due}


def _refresh(session: Session, org: int, doc: KbDocument, fetch: PageFetch, now: datetime) -> Any:
    outcome = url_refresh.refresh_document(
        session, organization_id=org, document_id=doc.id, fetch=fetch, now=now
    )
    session.commit()
    return outcome


def test_an_unchanged_recrawl_embeds_nothing_and_advances_the_clock(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    site.page("/faq", "FAQ", "<p>Answers to questions.</p>")
    org, t0 = new_org(), utc_now() - timedelta(days=2)
    doc = add(session, org, make_base(session, org), "faq", store.UrlSource(site.url("/faq")))
    ingest(session, org, doc, fetch=fetch, now=t0)
    chunks = chunk_rows(session, org, doc.id)
    assert doc.id in _due(session, utc_now())  # fetched two days ago; daily recrawl

    t1 = utc_now()
    assert _refresh(session, org, doc, fetch, t1).result == "unchanged"

    fresh = document(session, org, doc.id)
    assert (fresh.status, fresh.last_fetched_at, fresh.refresh_failures) == ("ready", t1, 0)
    assert fresh.next_refresh_at == t1 + timedelta(days=1)
    assert doc.id not in _due(session, t1 + timedelta(hours=23))
    embedder = CountingEmbedder()
    assert ingest(session, org, doc, embedder).unchanged and embedder.calls == 0
    assert chunk_rows(session, org, doc.id) == chunks and fresh.current_version == 1


def test_a_changed_recrawl_goes_back_through_ingestion_as_a_new_version(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    site.page("/news", "News", "<p>First edition.</p>")
    org = new_org()
    doc = add(session, org, make_base(session, org), "news", store.UrlSource(site.url("/news")))
    ingest(session, org, doc, fetch=fetch)
    site.page("/news", "News", "<p>Second edition, with more to say.</p>")

    assert _refresh(session, org, doc, fetch, utc_now()).result == "changed"
    assert document(session, org, doc.id).status == "processing"
    outcome = ingest(session, org, doc, fetch=fetch)

    assert (outcome.status, outcome.version) == ("ready", 2)
    assert "Second edition" in chunk_rows(session, org, doc.id)[0][1]
    kept = store.list_versions(session, organization_id=org, document_id=doc.id)
    assert [v.version for v in kept] == [2, 1]


def test_a_failed_refresh_keeps_the_document_ready_advances_the_clock_and_backs_off(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    site.page("/status", "Status", "<p>All good.</p>")
    org = new_org()
    doc = add(session, org, make_base(session, org), "s", store.UrlSource(site.url("/status")))
    ingest(session, org, doc, fetch=fetch, now=utc_now() - timedelta(days=3))
    chunks = chunk_rows(session, org, doc.id)
    site.answer("/status", 500, {"Content-Type": "text/plain"}, b"down")

    t2 = utc_now()
    outcome = _refresh(session, org, doc, fetch, t2)

    assert (outcome.result, outcome.reason) == ("failed", UNREACHABLE)
    failing = document(session, org, doc.id)
    assert (failing.status, failing.last_fetched_at, failing.refresh_failures) == ("ready", t2, 1)
    assert failing.next_refresh_at == t2 + timedelta(days=2)  # interval * 2**1
    assert chunk_rows(session, org, doc.id) == chunks
    assert doc.id not in _due(session, t2 + timedelta(days=1, hours=1))  # backing off
    assert doc.id in _due(session, t2 + timedelta(days=2, seconds=1))

    t3 = t2 + timedelta(days=2, seconds=1)
    _refresh(session, org, doc, fetch, t3)
    again = document(session, org, doc.id)
    assert again.refresh_failures == 2 and again.next_refresh_at == t3 + timedelta(days=4)

    site.page("/status", "Status", "<p>All good.</p>")
    assert _refresh(session, org, doc, fetch, t3 + timedelta(days=4)).result == "unchanged"
    assert document(session, org, doc.id).refresh_failures == 0


def test_a_base_refresh_schedule_brings_the_next_fetch_forward(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    site.page("/hourly", "Hourly", "<p>Often updated.</p>")
    org, t0 = new_org(), utc_now()
    base = make_base(session, org)
    doc = add(session, org, base, "h", store.UrlSource(site.url("/hourly")))
    ingest(session, org, doc, fetch=fetch, now=t0)
    assert doc.id not in _due(session, t0 + timedelta(hours=2))  # daily recrawl only

    store.set_refresh_schedule(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        refresh_schedule="hourly",
        recrawl_interval_seconds=DAY,
    )
    session.commit()

    assert document(session, org, doc.id).next_refresh_at == t0 + timedelta(hours=1)
    assert doc.id not in _due(session, t0 + timedelta(minutes=30))
    assert doc.id in _due(session, t0 + timedelta(hours=1, seconds=1))
    with pytest.raises(ValueError, match="refresh_schedule"):
        store.create_knowledge_base(session, organization_id=org, name="x", refresh_schedule="1m")
