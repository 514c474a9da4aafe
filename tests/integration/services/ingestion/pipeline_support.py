"""What the ingestion pipeline's tests share: documents, PDFs, a counting embedder, a
local site, and the calls that add and ingest a document (their fixtures are in this
directory's ``conftest.py``)."""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pypdf import PdfWriter
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, pipeline, store
from services.ingestion.url_sources import DEFAULT_RECRAWL_INTERVAL_SECONDS
from services.web.fetch import PageFetch
from shared.db.models import (
    KbChunk,
    KbDocument,
    KbDocumentVersion,
    KnowledgeBase,
    UsageEvent,
)

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


def wipe(factory: sessionmaker[Session], organizations: set[int]) -> None:
    with factory() as session:
        for model in (UsageEvent, KbChunk, KbDocumentVersion, KbDocument, KnowledgeBase):
            session.execute(delete(model).where(model.organization_id.in_(organizations)))
        session.commit()


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


def pipeline_text(raw: str) -> str:
    """What extraction makes of a posted text (whitespace normalised)."""
    from services.indexing.extract import extract

    return extract(raw.encode(), content_type="text/plain", filename=None).text


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
