"""Ingestion (seed 003) against real PostgreSQL, the float8[] fallback (the default server)
and pgvector (the embedded PostgreSQL 18) for the chunk storage: a document from
``processing`` to ``ready``, and to ``failed`` in every failure bucket (the final-attempt
verification included). The rest of the pipeline's tests are ``test_pipeline_*.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.ingestion import store
from services.web.failures import UNREACHABLE
from services.web.fetch import PageFetch
from shared.db.models import (
    UsageEvent,
)
from shared.errors import Retryable, Unrecoverable
from testkit.ports import free_port
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import (
    CHUNKER,
    CountingEmbedder,
    Site,
    add,
    blank_pdf,
    chunk_rows,
    document,
    ingest,
    make_base,
    pdf_with_text,
    pipeline_text,
    run,
    utc_now,
    words,
)

# -- processing -> ready -------------------------------------------------------------------


def test_a_text_document_goes_from_processing_to_ready(any_session: Session) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "refunds.md", store.TextSource(words("refunds")))
    assert doc.status == "processing" and doc.current_version == 0

    embedder = CountingEmbedder()
    outcome = ingest(session, org, doc, embedder)

    expected = CHUNKER.split(pipeline_text(words("refunds")))
    assert outcome.status == "ready" and outcome.version == 1
    assert outcome.chunk_count == len(expected) > 1 and embedder.texts == len(expected)
    doc = document(session, org, doc.id)
    assert (doc.status, doc.failure_reason, doc.current_version) == ("ready", None, 1)
    assert doc.ready_at is not None and doc.attempts == 1
    rows = chunk_rows(session, org, doc.id)
    assert [content for _, content, _ in rows] == [c.content for c in expected]
    assert [position for position, _, _ in rows] == list(range(len(expected)))
    assert all(len(vector) == 384 for _, _, vector in rows)
    events = session.scalars(select(UsageEvent).where(UsageEvent.organization_id == org)).all()
    assert [(e.kind, e.subject_id, e.payload["chunks"]) for e in events] == [
        ("kb_document_ingested", doc.id, len(expected))
    ]
    versions = store.list_versions(session, organization_id=org, document_id=doc.id)
    assert [v.version for v in versions] == [1]


def test_a_pdf_upload_becomes_ready(session: Session) -> None:
    org = new_org()
    base = make_base(session, org)
    data = pdf_with_text("Refunds are accepted within thirty days")
    doc = add(session, org, base, "policy.pdf", store.FileSource(data, "application/pdf", "p.pdf"))

    outcome = ingest(session, org, doc)

    assert outcome.status == "ready"
    assert "thirty days" in chunk_rows(session, org, doc.id)[0][1]


def test_a_url_document_is_fetched_stored_and_ready(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    org, now = new_org(), utc_now()
    site.page("/guide", "Guide", "<h1>Guide</h1><p>Resetting a password takes a minute.</p>")
    base = make_base(session, org)
    doc = add(session, org, base, "guide", store.UrlSource(site.url("/guide")), audience=["staff"])

    outcome = ingest(session, org, doc, fetch=fetch, now=now)

    assert outcome.status == "ready"
    source = store.read_source(session, organization_id=org, document_id=doc.id)
    assert b"Resetting a password" in (source or b"")
    stored = store.get_document(session, organization_id=org, document_id=doc.id)
    assert stored.last_fetched_at == now and stored.next_refresh_at == now + timedelta(days=1)
    chunks = store.list_chunks(session, organization_id=org, document_id=doc.id)
    assert chunks and all(chunk.audience == ["staff"] for chunk in chunks)


def test_a_large_source_is_read_back_exactly_in_slices(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = new_org()
    monkeypatch.setattr(store, "SOURCE_READ_SLICE", 1000)
    data = bytes(range(256)) * 39 + b"tail"  # 9,988 bytes: 10 slices, the last one short
    doc = add(
        session, org, make_base(session, org), "bin", store.FileSource(data, "text/plain", "b")
    )

    assert store.read_source(session, organization_id=org, document_id=doc.id) == data
    assert store.read_source(session, organization_id=org + 1, document_id=doc.id) is None


# -- processing -> failed, one test per bucket ---------------------------------------------


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (store.FileSource(b"", "text/plain", "empty.txt"), "zero-byte file"),
        (
            store.FileSource(pdf_with_text("cut short")[:150], "application/pdf", "cut.pdf"),
            "truncated or unreadable file",
        ),
        (
            store.FileSource(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png", "logo.png"),
            "unsupported content type",
        ),
        (store.FileSource(blank_pdf(), "application/pdf", "scan.pdf"), "no extractable text"),
    ],
    ids=["zero-byte", "truncated-pdf", "unsupported", "pdf-without-text"],
)
def test_unreadable_uploads_fail_with_their_reason_and_stay_failed(
    session: Session, source: store.FileSource, reason: str
) -> None:
    org = new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "upload", source)
    embedder = CountingEmbedder()

    outcome = ingest(session, org, doc, embedder)

    assert outcome.status == "failed" and outcome.failure_reason is not None
    assert outcome.failure_reason.startswith(reason)
    failed = document(session, org, doc.id)
    assert failed.status == "failed" and failed.failed_at is not None
    assert embedder.calls == 0 and chunk_rows(session, org, doc.id) == []
    # Terminal: another pass changes nothing; a retry re-runs the same bytes and fails alike.
    assert ingest(session, org, doc).failure_reason == outcome.failure_reason
    retried = store.mark_for_retry(session, organization_id=org, document_id=doc.id)
    assert (retried.status, retried.failure_reason) == ("processing", None)
    assert ingest(session, org, doc).failure_reason == outcome.failure_reason


def test_an_upload_over_10_mb_is_refused_before_it_is_stored(session: Session) -> None:
    org = new_org()
    base = make_base(session, org)
    with pytest.raises(store.DocumentTooLarge, match="content over 10 MB"):
        store.add_document(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            name="huge.txt",
            source=store.FileSource(b"a" * (10 * 1024 * 1024 + 1), "text/plain"),
        )
    assert store.list_documents(session, organization_id=org, knowledge_base_id=base.id) == []


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/huge", "content over 10 MB"),
        ("/moved-away", UNREACHABLE),
        ("/gone", UNREACHABLE),
        ("/image", "unsupported content type"),
    ],
)
def test_url_documents_that_cannot_be_fetched_fail_with_their_reason(
    session: Session, site: Site, fetch: PageFetch, path: str, reason: str
) -> None:
    site.answer("/huge", 200, {"Content-Type": "text/plain"}, b"x" * (10 * 1024 * 1024 + 10))
    site.answer("/moved-away", 302, {"Location": site.url("/guide", host="localhost")})
    site.answer("/gone", 404, {"Content-Type": "text/plain"}, b"no")
    site.answer("/image", 200, {"Content-Type": "image/png"}, b"\x89PNG")
    site.page("/guide", "Guide", "<p>guide</p>")
    org = new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "page", store.UrlSource(site.url(path)))

    outcome = ingest(session, org, doc, fetch=fetch)

    assert (outcome.status, outcome.failure_reason) == ("failed", reason)


def test_a_redirect_on_the_same_host_is_followed(
    session: Session, site: Site, fetch: PageFetch
) -> None:
    site.page("/new-home", "Home", "<p>moved here</p>")
    site.answer("/old-home", 301, {"Location": "/new-home"})
    org = new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "home", store.UrlSource(site.url("/old-home")))

    assert ingest(session, org, doc, fetch=fetch).status == "ready"


def test_an_unreachable_url_is_retried_then_failed_on_the_final_attempt(
    committed_fallback: tuple[sessionmaker[Session], set[int]], fetch: PageFetch
) -> None:
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        base = make_base(session, org)
        doc = add(session, org, base, "down", store.UrlSource(f"http://127.0.0.1:{free_port()}/"))

    # An attempt that is not the last raises for the platform to retry; still processing
    with pytest.raises(Retryable):
        run(factory, org, doc.id, CountingEmbedder(), final=False, fetch=fetch)
    with factory() as session:
        assert (document(session, org, doc.id).status, document(session, org, doc.id).attempts) == (
            "processing",
            1,
        )

    # The final attempt raises too, and leaves the document failed, not processing
    with pytest.raises(Retryable):
        run(factory, org, doc.id, CountingEmbedder(), final=True, fetch=fetch)
    with factory() as session:
        failed = document(session, org, doc.id)
    assert (failed.status, failed.failure_reason, failed.attempts) == ("failed", UNREACHABLE, 2)


def test_a_persistently_retryable_failure_ends_failed_not_processing(
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        base = make_base(session, org)
        doc = add(session, org, base, "notes", store.TextSource(words("notes")))
    broken = CountingEmbedder(fail=Retryable("embeddings: 503 Service Unavailable"))

    for attempt in (1, 2):
        with pytest.raises(Retryable):
            run(factory, org, doc.id, broken, final=False)
        with factory() as session:
            assert document(session, org, doc.id).status == "processing", attempt
    with pytest.raises(Retryable):
        run(factory, org, doc.id, broken, final=True)

    with factory() as session:
        failed = document(session, org, doc.id)
        assert failed.status == "failed" and failed.attempts == 3
        assert failed.failure_reason == (
            "temporary failure persisted after 3 attempts: embeddings: 503 Service Unavailable"
        )
        assert chunk_rows(session, org, doc.id) == []


def test_an_unrecoverable_embedder_error_fails_the_document_at_once(
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), "n", store.TextSource(words("n")))

    with pytest.raises(Unrecoverable):
        run(factory, org, doc.id, CountingEmbedder(fail=Unrecoverable("401 bad key")), final=False)

    with factory() as session:
        failed = document(session, org, doc.id)
    assert (failed.status, failed.failure_reason) == ("failed", "ingestion failed: 401 bad key")


def test_vectors_of_another_dimension_are_refused_where_the_column_is_a_vector(
    pg_session: Session,
) -> None:
    org = new_org()
    doc = add(pg_session, org, make_base(pg_session, org), "n", store.TextSource(words("n")))

    with pytest.raises(Unrecoverable, match=r"vector\(384\)"):
        ingest(pg_session, org, doc, CountingEmbedder(dimensions=8))
