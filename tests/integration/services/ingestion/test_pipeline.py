"""Ingestion (seed 003) against real PostgreSQL: the float8[] fallback (the default server)
and pgvector (the embedded PostgreSQL 18) for the chunk storage.

Covered: every state transition and failure bucket, the unchanged short-circuit, concurrent
ingestions, versioning and rollback, the final-attempt verification (also through a real
worker), the sweep tick's bounds, recrawl and refresh, and tenant isolation.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pypdf import PdfWriter
from sqlalchemy import Engine, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from services.indexing import chunk_batches
from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, pipeline, search, store, url_refresh
from services.ingestion.families import ingest_job_id
from services.ingestion.rollback import request_rollback
from services.ingestion.store import documents_to_ingest, documents_to_refresh
from services.ingestion.ticks import SweepBounds, sweep_processing
from services.ingestion.url_sources import DEFAULT_RECRAWL_INTERVAL_SECONDS
from services.web.failures import UNREACHABLE
from services.web.fetch import PageFetch, page_fetcher
from shared.db import migrate
from shared.db.base import API2_SCHEMA, Api2Base
from shared.db.engine import make_session_factory
from shared.db.models import (
    IngestionApiKey,
    KbChunk,
    KbDocument,
    KbDocumentVersion,
    KnowledgeBase,
    UsageEvent,
)
from shared.db.vector import compare_type, embedding_storage, has_pgvector, include_object
from shared.errors import RecordMissing, Retryable, Unrecoverable
from testkit.fakes.embeddings_server import RATE_LIMITED, running_embeddings_server
from testkit.ports import free_port
from tests.fixtures_db import joined_session
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import new_org
from tiers.policies import RetryPolicy
from tiers.table import TIERS
from tiers.worker import serve

DAY = DEFAULT_RECRAWL_INTERVAL_SECONDS
CHUNKER = Chunker(max_tokens=40, overlap_tokens=5)


# -- helpers -------------------------------------------------------------------------------


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def words(seed: object, n: int = 150) -> str:
    """A text of several chunks, different for every seed."""
    body = " ".join(f"term{seed}x{i}" for i in range(n))
    return f"# Document {seed}\n\nIntroduction to {seed}.\n\n{body}\n"


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting what it is asked; optionally failing or waiting for
    others at a barrier (to line up concurrent runs: it then waits, so it is not CPU-bound
    and takes no CPU gate, which would keep the others from reaching the barrier)."""

    def __init__(
        self,
        *,
        dimensions: int = 384,
        fail: Exception | None = None,
        barrier: threading.Barrier | None = None,
    ) -> None:
        super().__init__(dimensions)
        self.calls = 0
        self.texts = 0
        self.fail = fail
        self.barrier = barrier
        self.cpu_bound = barrier is None
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            self.calls += 1
            self.texts += len(texts)
        if self.fail is not None:
            raise self.fail
        if self.barrier is not None:
            self.barrier.wait(timeout=30)
        return super().embed(texts)


def pdf_with_text(words_in_pdf: str) -> bytes:
    """A one-page PDF whose page shows ``words_in_pdf`` in Helvetica."""
    stream = f"BT /F1 18 Tf 72 720 Td ({words_in_pdf}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def blank_pdf() -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


class Site:
    """A local website whose pages a test sets and changes: path -> (status, headers, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site.routes.get(self.path, (404, {}, b"missing"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def page(self, path: str, title: str, body: str) -> None:
        html = f"<html><head><title>{title}</title></head><body><main>{body}</main></body></html>"
        self.routes[path] = (200, {"Content-Type": "text/html; charset=utf-8"}, html.encode())

    def answer(self, path: str, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.routes[path] = (status, headers, body)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    site = Site()
    site.thread.start()
    yield site
    site.server.shutdown()
    site.server.server_close()


@pytest.fixture
def fetch() -> PageFetch:
    return page_fetcher(allow_private=True, timeout=5)


@pytest.fixture
def pg_session(pgvector_engine: Engine) -> Iterator[Session]:
    """Like ``session``, on the pgvector database."""
    yield from joined_session(pgvector_engine)


@pytest.fixture(params=["fallback", "pgvector"])
def any_session(request: pytest.FixtureRequest) -> Session:
    """Both storages: ``float8[]`` (default server) and pgvector."""
    name = "session" if request.param == "fallback" else "pg_session"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def _wipe(factory: sessionmaker[Session], organizations: set[int]) -> None:
    with factory() as session:
        for model in (UsageEvent, KbChunk, KbDocumentVersion, KbDocument, KnowledgeBase):
            session.execute(delete(model).where(model.organization_id.in_(organizations)))
        session.commit()


@pytest.fixture(params=["fallback", "pgvector"])
def committed(request: pytest.FixtureRequest) -> Iterator[tuple[sessionmaker[Session], set[int]]]:
    """A committing session factory on either storage, and a set to put organization ids
    in: their rows are deleted afterwards."""
    engine: Engine = request.getfixturevalue(
        "engine" if request.param == "fallback" else "pgvector_engine"
    )
    factory = make_session_factory(engine)
    organizations: set[int] = set()
    yield factory, organizations
    _wipe(factory, organizations)


@pytest.fixture
def committed_fallback(engine: Engine) -> Iterator[tuple[sessionmaker[Session], set[int]]]:
    factory = make_session_factory(engine)
    organizations: set[int] = set()
    yield factory, organizations
    _wipe(factory, organizations)


def make_base(session: Session, org: int, **kw: Any) -> KnowledgeBase:
    return store.create_knowledge_base(session, organization_id=org, name="Help center", **kw)


def add(
    session: Session,
    org: int,
    base: KnowledgeBase,
    name: str,
    source: store.DocumentSource,
    **kw: Any,
) -> KbDocument:
    added = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name=name,
        source=source,
        **kw,
    )
    session.commit()
    return added.document


def ingest(
    session: Session,
    org: int,
    document: KbDocument,
    embedder: HashingEmbedder | None = None,
    *,
    fetch: PageFetch | None = None,
    now: datetime | None = None,
) -> pipeline.IngestOutcome:
    outcome = pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=document.id,
        chunker=CHUNKER,
        embedder=embedder or CountingEmbedder(),
        now=now or utc_now(),
        fetch=fetch,
    )
    session.commit()
    return outcome


def chunk_rows(session: Session, org: int, document_id: int) -> list[tuple[int, str, list[float]]]:
    return [
        (chunk.position, chunk.content, chunk.embedding)
        for chunk in store.list_chunks(session, organization_id=org, document_id=document_id)
    ]


def document(session: Session, org: int, document_id: int) -> KbDocument:
    return store.get_document(session, organization_id=org, document_id=document_id)


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


def pipeline_text(raw: str) -> str:
    """What extraction makes of a posted text (whitespace normalised)."""
    from services.indexing.extract import extract

    return extract(raw.encode(), content_type="text/plain", filename=None).text


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


def run(
    factory: sessionmaker[Session],
    org: int,
    doc_id: int,
    embedder: HashingEmbedder,
    *,
    final: bool,
    fetch: PageFetch | None = None,
) -> pipeline.IngestOutcome:
    return ingestion_job.run_ingestion(
        factory,
        organization_id=org,
        document_id=doc_id,
        chunker=CHUNKER,
        embedder=embedder,
        final_attempt=final,
        now=utc_now(),
        fetch=fetch,
    )


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


# -- the sweep tick ------------------------------------------------------------------------


def _processing(session: Session, org: int, base: KnowledgeBase, n: int, t0: datetime, step: int):  # type: ignore[no-untyped-def]
    docs = []
    for i in range(n):
        docs.append(
            store.add_document(
                session,
                organization_id=org,
                knowledge_base_id=base.id,
                name=f"doc-{i}",
                source=store.TextSource(f"text {i}"),
                now=t0 + timedelta(seconds=step * i),
            ).document
        )
    session.flush()
    return docs


def test_the_sweep_takes_the_oldest_first_bounded_overall_and_per_tenant(
    session: Session,
) -> None:
    # The sweep spans tenants: other tests' committed documents in this worker's database
    # would take places, so they are settled here (rolled back with the test).
    session.execute(
        update(KbDocument).where(KbDocument.status == "processing").values(status="failed")
    )
    t0 = utc_now() - timedelta(hours=1)
    big, small, tiny = new_org(), new_org(), new_org()
    bulk = _processing(session, big, make_base(session, big), 30, t0, 1)  # an import
    few = _processing(session, small, make_base(session, small), 3, t0 + timedelta(seconds=5), 10)
    one = _processing(session, tiny, make_base(session, tiny), 1, t0 + timedelta(seconds=100), 1)
    # settled and deleted documents are not swept
    done = _processing(session, tiny, make_base(session, tiny), 2, t0 - timedelta(hours=1), 1)
    done[0].status = "ready"
    store.delete_document(session, organization_id=tiny, document_id=done[1].id)
    session.flush()

    wide = documents_to_ingest(session, limit=100, tenant_slice=4)
    narrow = documents_to_ingest(session, limit=5, tenant_slice=4)

    expected = sorted(
        [*bulk[:4], *few, *one], key=lambda d: (d.submitted_at, d.id)
    )  # four of the import, everything of the others, oldest first
    assert [d.document_id for d in wide] == [d.id for d in expected]
    assert [d.document_id for d in narrow] == [d.id for d in expected[:5]]
    assert {(d.organization_id, d.knowledge_base_id) for d in wide if d.organization_id == big} == {
        (big, bulk[0].knowledge_base_id)
    }


def test_the_sweep_enqueues_under_deterministic_ids_and_a_queued_id_is_a_no_op(
    session: Session, platform: Platform
) -> None:
    org = new_org()
    docs = _processing(session, org, make_base(session, org), 3, utc_now(), 1)
    bounds = SweepBounds(limit=200, tenant_slice=2)

    first = sweep_processing(session, platform.router, bounds)
    second = sweep_processing(session, platform.router, bounds)

    mine = [ingest_job_id(d.id) for d in docs[:2]]
    assert all(platform.broker.jobs.record(job) for job in mine)
    assert platform.broker.jobs.record(ingest_job_id(docs[2].id)) is None  # over the slice
    assert first["added"] >= 2 and first["failed"] == 0
    assert second["added"] == 0 and second["deduplicated"] == first["added"]


# -- through the platform: the families, the tick and a real worker ------------------------


def ingestion_platform(make_platform: MakePlatform, **settings: Any) -> Platform:
    """Ingestion alone, allowed to fetch from 127.0.0.1, its family given three attempts as
    in production and a short backoff so the test watches them all."""
    return make_platform(
        services=["services.ingestion"],
        retries={"ingestion": RetryPolicy(max_attempts=3, base_seconds=0.2)},
        crawl_allow_private_networks=True,
        crawl_private_networks_acknowledged=True,
        http_timeout_seconds=5,
        **settings,
    )


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return ingestion_platform(make_platform)


@contextlib.contextmanager
def worker(platform: Platform) -> Iterator[None]:
    queues = [queue for tier in TIERS for queue in platform.registry.queues_of_tier(tier)]
    stop = threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(platform.broker, queues),
        kwargs={"threads": 2, "stop": stop, "poll_ms": 50, "drain_seconds": 5},
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=15)


def wait_for_status(
    factory: sessionmaker[Session], org: int, doc_id: int, status: str, timeout: float = 30
) -> KbDocument:
    deadline = time.monotonic() + timeout
    while True:
        with factory() as session:
            found = document(session, org, doc_id)
        if found.status == status or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_the_sweep_tick_and_a_worker_take_an_upload_to_ready(
    platform: Platform, committed_fallback: tuple[sessionmaker[Session], set[int]]
) -> None:
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), "w", store.TextSource(words("w")))

    summary = platform.tick("ingestion-sweep").run("2026-12-01T00:00Z")
    with worker(platform):
        ready = wait_for_status(factory, org, doc.id, "ready")

    assert summary["added"] >= 1 and ready.status == "ready"
    assert platform.broker.jobs.record(ingest_job_id(doc.id))["state"] == "completed"  # type: ignore[index]


def test_a_worker_marks_a_persistently_failing_document_failed_on_its_last_attempt(
    make_platform: MakePlatform,
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    # Given an embedding API that never answers (every attempt is Retryable)
    platform = ingestion_platform(
        make_platform,
        embedder="openai",
        embedding_api_url=f"http://127.0.0.1:{free_port()}/v1",
        embedding_dimensions=384,
    )
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), "f", store.TextSource(words("f")))

    platform.router.enqueue(pipeline_request(org, doc.id))
    with worker(platform):
        failed = wait_for_status(factory, org, doc.id, "failed")
        deadline = time.monotonic() + 10
        while platform.broker.jobs.record(ingest_job_id(doc.id))["state"] != "failed":  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)

    assert failed.status == "failed" and failed.attempts == 3
    assert (failed.failure_reason or "").startswith("temporary failure persisted after 3 attempts")


def test_an_embedder_answering_429_forever_ends_the_document_failed(
    make_platform: MakePlatform,
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    # Given an embedding API that answers 429 with Retry-After: 0 to every request, and
    # the family's limit of 3 consecutive provider delays per attempt (2 attempts)
    with running_embeddings_server(dimensions=384, retry_after="0") as embeddings:
        embeddings.fail_next(*[RATE_LIMITED] * 10_000)
        platform = make_platform(
            services=["services.ingestion"],
            retries={
                "ingestion": RetryPolicy(max_attempts=2, base_seconds=0.2, max_consecutive_delays=3)
            },
            embedder="openai",
            embedding_api_url=embeddings.base_url,
            embedding_api_key="sk-test",
            embedding_dimensions=384,
        )
        factory, organizations = committed_fallback
        org = new_org()
        organizations.add(org)
        with factory() as session:
            doc = add(session, org, make_base(session, org), "z", store.TextSource(words("z")))

        platform.router.enqueue(pipeline_request(org, doc.id))
        with worker(platform):
            failed = wait_for_status(factory, org, doc.id, "failed")
            deadline = time.monotonic() + 10
            while platform.broker.jobs.record(ingest_job_id(doc.id))["state"] != "failed":  # type: ignore[index]
                assert time.monotonic() < deadline
                time.sleep(0.05)

    # Then the document left processing for failed, and the job failed with it
    assert failed.status == "failed"
    assert "kept asking to wait" in (failed.failure_reason or "")
    record = platform.broker.jobs.record(ingest_job_id(doc.id))
    assert record is not None and record["last_error"].startswith("DelaysExhausted")
    # Each attempt: three delays allowed, the fourth request's 429 spent it
    assert len(embeddings.requests) == 8


def pipeline_request(org: int, doc_id: int) -> Any:
    from services.ingestion.families import ingest_request

    return ingest_request(org, doc_id)


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


# -- the store -----------------------------------------------------------------------------


def test_a_re_upload_replaces_in_place_and_a_delete_frees_the_name(session: Session) -> None:
    org = new_org()
    base = make_base(session, org)
    first = add(session, org, base, "guide", store.TextSource(words("g1")))
    ingest(session, org, first)

    replaced = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name="guide",
        source=store.FileSource(b"new bytes", "text/plain", "guide.txt"),
    )
    assert replaced.replaced and replaced.document.id == first.id
    assert (replaced.document.status, replaced.document.kind) == ("processing", "file")
    assert chunk_rows(session, org, first.id) != []  # the old chunk set serves meanwhile

    store.delete_document(session, organization_id=org, document_id=first.id)
    assert chunk_rows(session, org, first.id) == []
    with pytest.raises(RecordMissing):
        ingest(session, org, first)
    fresh = add(session, org, base, "guide", store.TextSource("again"))
    assert fresh.id != first.id
    listed = store.list_documents(session, organization_id=org, knowledge_base_id=base.id)
    assert [d.id for d in listed] == [fresh.id]

    store.delete_knowledge_base(session, organization_id=org, knowledge_base_id=base.id)
    with pytest.raises(RecordMissing):
        store.get_document(session, organization_id=org, document_id=fresh.id)
    assert store.list_knowledge_bases(session, organization_id=org) == []


def test_a_re_upload_keeps_its_current_version_searchable_under_the_new_audience(
    any_session: Session,
) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "notes", store.TextSource("Walrus migration notes."))
    ingest(session, org, doc)

    def visible(audience: Sequence[str] = ()) -> list[str]:
        """The chunk contents a search shows this audience (any query ranks them all)."""
        hits = search.search(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            query="notes",
            audience=audience,
            embedder=HashingEmbedder(),
        )
        return [session.get_one(KbChunk, hit.chunk_id).content for hit in hits]

    assert visible() == ["Walrus migration notes."]

    # When it is re-uploaded for staff only, while the new content is processed
    add(session, org, base, "notes", store.TextSource("Narwhal tusk notes."), audience=["staff"])
    # Then the old version still answers, for staff only
    assert visible() == []
    assert visible(["staff"]) == ["Walrus migration notes."]
    # and once ingested the new content replaces it
    ingest(session, org, doc)
    assert visible(["staff"]) == ["Narwhal tusk notes."]

    # When the next upload cannot be read, the document fails and keeps its last good version
    add(
        session,
        org,
        base,
        "notes",
        store.FileSource(b"%PDF-1.7 trunc", "application/pdf", "n"),
        audience=["staff"],
    )
    outcome = ingest(session, org, doc)
    assert outcome.status == "failed"
    assert visible(["staff"]) == ["Narwhal tusk notes."]


@pytest.mark.parametrize(
    ("name", "source", "problem"),
    [
        ("  ", store.TextSource("x"), "name"),
        ("u", store.UrlSource("ftp://example.com/"), "url"),
        ("u", store.UrlSource("https://example.com/", crawl_depth=9), "crawl_depth"),
    ],
)
def test_bad_document_input_is_refused(
    session: Session, name: str, source: store.DocumentSource, problem: str
) -> None:
    org = new_org()
    base = make_base(session, org)
    with pytest.raises(ValueError, match=problem):
        store.add_document(
            session, organization_id=org, knowledge_base_id=base.id, name=name, source=source
        )


def test_api_keys_are_stored_hashed_and_can_be_revoked(session: Session) -> None:
    org = new_org()
    key, plain = store.create_api_key(session, organization_id=org, name="ci")

    assert plain.startswith("stk_") and plain not in key.key_hash and len(key.key_hash) == 64
    assert store.organization_for_key(session, plain) == org
    assert store.organization_for_key(session, plain + "x") is None
    assert store.organization_for_key(session, "") is None
    with pytest.raises(RecordMissing):
        store.revoke_api_key(session, organization_id=new_org(), key_id=key.id)
    store.revoke_api_key(session, organization_id=org, key_id=key.id)
    session.flush()
    assert store.organization_for_key(session, plain) is None
    stored = session.scalars(select(IngestionApiKey.key_hash)).all()
    assert plain not in stored


# -- tenant isolation ----------------------------------------------------------------------


def test_another_organization_cannot_reach_a_document_by_id(session: Session) -> None:
    a, b = new_org(), new_org()
    base = make_base(session, a)
    doc = add(session, a, base, "secret", store.TextSource(words("secret")))
    ingest(session, a, doc)
    ids = {"organization_id": b, "document_id": doc.id}

    for call in (
        lambda: store.get_document(session, **ids),
        lambda: store.delete_document(session, **ids),
        lambda: store.mark_for_retry(session, **ids),
        lambda: store.list_versions(session, **ids),
        lambda: store.get_version(session, version=1, **ids),
        lambda: store.get_knowledge_base(session, organization_id=b, knowledge_base_id=base.id),
        lambda: store.list_documents(session, organization_id=b, knowledge_base_id=base.id),
        lambda: store.add_document(
            session,
            organization_id=b,
            knowledge_base_id=base.id,
            name="x",
            source=store.TextSource("x"),
        ),
        lambda: ingest(session, b, doc),
        lambda: request_rollback(
            session, version=1, chunker=CHUNKER, embedder=CountingEmbedder(), now=utc_now(), **ids
        ),
    ):
        with pytest.raises(RecordMissing):
            call()
    assert store.list_chunks(session, organization_id=b, document_id=doc.id) == []
    assert store.list_knowledge_bases(session, organization_id=b) == []
    assert document(session, a, doc.id).status == "ready"  # untouched

    # And the schema itself refuses a chunk pointing at another organization's document
    with pytest.raises(IntegrityError), session.begin_nested():
        session.add(
            KbChunk(
                organization_id=b,
                knowledge_base_id=base.id,
                document_id=doc.id,
                position=99,
                content="x",
                token_count=1,
                embedding=[0.0] * 384,
            )
        )
        session.flush()


# -- storage: float8[] fallback and pgvector -----------------------------------------------


def test_the_fallback_stores_float8_arrays_exactly(session: Session) -> None:
    org = new_org()
    doc = add(session, org, make_base(session, org), "f", store.TextSource(words("f")))
    ingest(session, org, doc)

    assert not has_pgvector(session)
    assert embedding_storage(session).kind == "float8[]"
    first = store.list_chunks(session, organization_id=org, document_id=doc.id)[0]
    assert first.embedding == HashingEmbedder().embed([first.content])[0]


def test_pgvector_stores_vectors_in_the_row_and_searches_them_through_hnsw(
    pg_session: Session,
) -> None:
    session, org = pg_session, new_org()
    doc = add(session, org, make_base(session, org), "v", store.TextSource(words("v", 400)))
    ingest(session, org, doc)

    assert has_pgvector(session) and embedding_storage(session).dims == 384
    storage = session.scalar(
        text(
            "SELECT attstorage FROM pg_attribute "
            "WHERE attrelid = 'api2.kb_chunks'::regclass AND attname = 'embedding'"
        )
    )
    assert storage == "p"  # PLAIN: in the row
    target = store.list_chunks(session, organization_id=org, document_id=doc.id)[3]
    query = "[" + ",".join(str(v) for v in HashingEmbedder().embed([target.content])[0]) + "]"
    session.execute(text("SET LOCAL enable_seqscan = off"))
    statement = "SELECT id FROM api2.kb_chunks ORDER BY embedding <=> CAST(:q AS vector) LIMIT 3"
    plan = "\n".join(session.scalars(text("EXPLAIN " + statement), {"q": query}))
    assert "ix_kb_chunks_embedding_hnsw" in plan
    assert session.scalars(text(statement), {"q": query}).first() == target.id
    assert target.embedding == pytest.approx(HashingEmbedder().embed([target.content])[0], abs=1e-6)


def test_models_match_the_migrations_on_pgvector(pgvector_database_url: str) -> None:
    engine = migrate.make_engine(pgvector_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "include_schemas": True,
                    "include_name": lambda n, t, _p: n == API2_SCHEMA if t == "schema" else True,
                    "include_object": include_object,
                    "compare_type": compare_type,
                    "compare_server_default": True,
                    "version_table": migrate.VERSION_TABLE,
                    "version_table_schema": migrate.VERSION_TABLE_SCHEMA,
                },
            )
            assert compare_metadata(context, Api2Base.metadata) == []
    finally:
        engine.dispose()
