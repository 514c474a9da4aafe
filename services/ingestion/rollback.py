"""Rolling a document back to a kept version: the version's text becomes the document's
source again and the document goes back to ``processing``, for its ingestion job to
re-index it like any upload (as a new current version: history records what replaced what).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker, index_fingerprint
from services.ingestion import store
from services.ingestion.url_sources import MARKDOWN_CONTENT_TYPE


def request_rollback(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    version: int,
    chunker: DocumentChunker,
    embedder: Embedder,
    now: datetime,
) -> bool:
    """Make a kept version's content the document's source and put the document back in
    ``processing``, for its ingestion job to re-index (the caller commits, then enqueues;
    the sweep tick finds it anyway). Like any ingestion, the restored content becomes
    current under a new version number (history records what replaced what) and replaces
    the chunk set in one transaction; until then search answers from the current version.
    Re-indexing runs as a job, not in the request: it is retried, delayed by the
    embedder's rate window, and serialised with the tenant's other ingestions.

    A URL document's next refresh may replace the restored text with the live page again.

    Returns:
      False when the document is ready and the version's content is already current with a
      complete chunk set (same chunker and embedder): nothing changed. True when queued
      (a failed document rolled back to its current content is queued too: its ingestion
      embeds nothing and marks it ready).

    Raises:
      RecordMissing: the document is missing or another tenant's, or the version is not
        kept.
      store.DocumentBusy: the document is being ingested.
    """
    store.get_document(session, organization_id=organization_id, document_id=document_id)
    kept = store.get_version(
        session, organization_id=organization_id, document_id=document_id, version=version
    )
    document = store.locked_document(
        session, organization_id=organization_id, document_id=document_id
    )
    if document.status == "processing":
        raise store.DocumentBusy(f"document {document_id} is being ingested")
    if (
        document.status == "ready"
        and kept.content_hash == document.content_hash
        and index_fingerprint(chunker, embedder) == document.index_fingerprint
        and store.has_chunks(session, organization_id, document_id)
    ):
        return False
    document.source_bytes = kept.content.encode()
    document.content_type = MARKDOWN_CONTENT_TYPE
    store.resubmit(document, now, cause="rollback")
    session.flush()
    return True
