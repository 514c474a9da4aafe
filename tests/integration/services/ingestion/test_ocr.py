"""Scanned PDFs through ingestion on real PostgreSQL: OCR makes a scan searchable, and a
blank scan ends ``failed`` with the OCR reason (seed 003's failure bucket)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.indexing.extract import NO_PDF_TEXT
from services.ingestion import pipeline, search, store
from shared.db.base import utcnow
from shared.db.models import KbChunk
from testkit.scans import scanned_pdf
from tests.integration.services.ingestion.factories import new_org


def _ingest_scan(session: Session, org: int, pdf: bytes) -> tuple[int, pipeline.IngestOutcome]:
    base = store.create_knowledge_base(session, organization_id=org, name="Scans")
    added = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name="scan.pdf",
        source=store.FileSource(pdf, "application/pdf", "scan.pdf"),
    )
    session.commit()
    outcome = pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=added.document.id,
        chunker=Chunker(max_tokens=40, overlap_tokens=5),
        embedder=HashingEmbedder(),
        now=utcnow(),
    )
    session.commit()
    return base.id, outcome


def test_a_scanned_pdf_is_ocred_ready_and_searchable(session: Session) -> None:
    org = new_org()
    pdf = scanned_pdf([["Walrus tusk maintenance guide"], ["Refunds take fourteen days"]])

    base_id, outcome = _ingest_scan(session, org, pdf)

    assert outcome.status == "ready", outcome.failure_reason
    hits = search.search(
        session,
        organization_id=org,
        knowledge_base_id=base_id,
        query="walrus maintenance",
        embedder=HashingEmbedder(),
    )
    contents = [session.get_one(KbChunk, hit.chunk_id).content for hit in hits]
    assert any("Walrus tusk maintenance guide" in content for content in contents)
    assert any("Refunds take fourteen days" in content for content in contents)


def test_a_blank_scan_ends_failed_with_the_ocr_reason(session: Session) -> None:
    org = new_org()

    _base_id, outcome = _ingest_scan(session, org, scanned_pdf([[]]))

    assert (outcome.status, outcome.failure_reason) == ("failed", NO_PDF_TEXT)
    document = store.get_document(session, organization_id=org, document_id=outcome.document_id)
    assert (document.status, document.failure_reason) == ("failed", NO_PDF_TEXT)
