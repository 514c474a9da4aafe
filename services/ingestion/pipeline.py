"""The ingestion pipeline: one pass over one document, from ``processing`` to ``ready`` or
``failed``.

:func:`ingest_document` extracts text from the document's stored source bytes (fetching a
URL document first), and compares the text's hash with the indexed one: unchanged content
with a complete chunk set made by the same chunker and embedder embeds nothing. Otherwise
it chunks and embeds *before* taking the document's lock, then, in the caller's
transaction, writes the new version, replaces the chunk set (delete + insert) and marks the
document ready with a usage event, so readers see the old chunk set or the new one, never
half of either (one statement writes the version, deletes the old chunk set, marks the
document ready and records the event; one ``COPY`` adds the new chunks). Concurrent runs
serialise on the lock; a run that finds the work done (or
the document re-submitted or deleted meanwhile) writes nothing.

Failures: an extraction failure (or an unreachable, redirecting or oversize URL) marks the
document ``failed`` with a short reason at once; no retry can fix the same bytes. A
transient error propagates for the platform to retry; the ingestion job
(:mod:`services.ingestion.ingestion_job`) verifies the terminal state after every
unsuccessful attempt. A failed replacement leaves the previous version's chunk set
(``current_version``) in place.

Versions: each content that becomes current is written once to ``kb_document_versions``
as version ``current_version + 1``, with the cause of the submission that brought it
(``upload``, ``recrawl``, ``refresh``, ``connector``, ``feed``, ``rollback``); the current
version and the ten most recent superseded ones are kept. A rollback
(:mod:`services.ingestion.rollback`) makes a kept version's content the document's source
again, for this pipeline to make it current (under a new version number, cause
``rollback``: history records what replaced what).

Re-fetching ready URL documents (recrawl, scheduled refresh) is
:mod:`services.ingestion.url_refresh`; a changed page comes back through this pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from services.indexing.chunk_batches import embed_chunks
from services.indexing.cpu_gate import cpu_gate_for
from services.indexing.digests import text_hash
from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker, index_fingerprint
from services.indexing.kb_chunks import check_embedding_dimensions
from services.indexing.ocr import DEFAULT_OCR_LIMITS, OcrLimits
from services.ingestion import store
from services.ingestion.feeds import RSS_CONNECTOR, FeedUnreadable, feed_document_source
from services.ingestion.index_write import NewIndex, write_index
from services.ingestion.url_sources import (
    DEFAULT_RECRAWL_INTERVAL_SECONDS,
    MARKDOWN_CONTENT_TYPE,
    fetch_url_source,
    next_refresh_time,
)
from services.web.failures import FetchFailed
from services.web.feed_fetch import FeedFetch
from services.web.fetch import PageFetch
from shared.db.models.ingestion import KbDocument
from shared.errors import Retryable, Unrecoverable

NO_TEXT = "no extractable text"
REASON_LENGTH = 200


@dataclass(frozen=True)
class IngestOutcome:
    """What one ingestion pass did.

    Attributes:
      status: the document's status afterwards.
      version: its ``current_version`` afterwards.
      chunk_count: chunks it has now.
      embedded: texts sent to the embedder by this pass (0 when unchanged).
      unchanged: the stored chunk set already matched; nothing was re-indexed.
      failure_reason: set when this pass failed the document.
      superseded: the document was re-submitted (or retried) while this pass ran; it
        wrote nothing and the new submission needs a pass of its own.
    """

    document_id: int
    status: str
    version: int
    chunk_count: int
    embedded: int = 0
    unchanged: bool = False
    failure_reason: str | None = None
    superseded: bool = False


def ingest_document(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    chunker: DocumentChunker,
    embedder: Embedder,
    now: datetime,
    fetch: PageFetch | None = None,
    recrawl_interval_seconds: float = DEFAULT_RECRAWL_INTERVAL_SECONDS,
    ocr: OcrLimits = DEFAULT_OCR_LIMITS,
    fetch_feed: FeedFetch | None = None,
    read: store.DocumentRead | None = None,
) -> IngestOutcome:
    """Run one ingestion pass over a document in ``processing``, in the caller's transaction
    (the caller commits). A document in another status is left as it is.

    Parameters:
      read: the document and its source bytes as the caller just read them in this
        database session (``store.read_document``), so the pass does not read them again;
        None: the pass reads them.
      chunker / embedder: the shared chunk/embed component.
      now: the time written as ``ready_at``, ``failed_at`` or ``last_fetched_at``.
      fetch: fetches a page (``services.web.fetch.page_fetcher``); needed for a URL document
        whose page has not been stored yet.
      recrawl_interval_seconds: a fetched URL document's next refresh is due after this
        (or its base's schedule, when sooner).
      ocr: the OCR bounds for a PDF's pages without a text layer (a scan).
      fetch_feed: fetches a feed (``services.web.feed_fetch.feed_fetcher``); needed for a
        URL document bound to the ``rss`` connector (:mod:`services.ingestion.feeds`).

    Returns:
      the :class:`IngestOutcome`; a terminal failure is an outcome, not an exception.

    Raises:
      RecordMissing: the document is missing, deleted or another tenant's.
      Delay / Retryable: transient; nothing was written (see ``ingestion_job``).
      Unrecoverable: the embedder's vectors cannot be stored (dimension mismatch).
    """
    from services.indexing.extract import ExtractionFailed

    if read is None:
        read = store.read_document(
            session, organization_id=organization_id, document_id=document_id
        )
    document = read.document
    if document.status != "processing":
        return _settled(session, document, unchanged=True)
    this = _Pass(session, read, now, recrawl_interval_seconds, ocr)
    try:
        text = this.extract_text(fetch, fetch_feed, embedder)
    except (FetchFailed, ExtractionFailed, FeedUnreadable) as exc:
        return this.failed(exc.reason)
    digest, fingerprint = text_hash(text), index_fingerprint(chunker, embedder)
    if (
        digest == document.content_hash
        and fingerprint == document.index_fingerprint
        and store.has_chunks(session, organization_id, document_id)
    ):
        return this.unchanged()
    with cpu_gate_for(embedder, len(text)):
        chunks = chunker.split(text)
    if not chunks:
        return this.failed(NO_TEXT)
    check_embedding_dimensions(session, embedder)
    with cpu_gate_for(embedder, len(text)):
        vectors = embed_chunks(embedder, chunks)
    return this.indexed(NewIndex(text, digest, fingerprint, chunks, vectors))


class _Pass:
    """One pass over one submission of a document: what it fetched, and the three ways it
    ends under the document's lock (failed, unchanged, indexed), each writing only while
    the submission it started on is still the document's."""

    def __init__(
        self,
        session: Session,
        read: store.DocumentRead,
        now: datetime,
        recrawl_interval: float,
        ocr: OcrLimits = DEFAULT_OCR_LIMITS,
    ) -> None:
        self.session = session
        self.read = read
        self.document = document = read.document
        self.submitted_at = document.submitted_at
        self.now = now
        self.recrawl_interval = recrawl_interval
        self.ocr = ocr
        self.fetched: bytes | None = None

    def extract_text(
        self,
        fetch: PageFetch | None,
        fetch_feed: FeedFetch | None = None,
        embedder: Embedder | None = None,
    ) -> str:
        """The document's text, from its stored source or, for a URL document without one,
        from its page (kept in :attr:`fetched`, stored when the pass ends); the source is
        parsed under ``embedder``'s CPU gate (a page is fetched outside it)."""
        from services.indexing.extract import extract

        document = self.document
        source = self.read.take_source()
        if document.kind == "url" and source is None and document.connector == RSS_CONNECTOR:
            if fetch_feed is None:
                raise Unrecoverable(f"document {document.id}: a feed document needs a fetcher")
            source = self.fetched = feed_document_source(
                self.session, document, fetch_feed, self.now
            )
        elif document.kind == "url" and source is None:
            if fetch is None:
                raise Unrecoverable(f"document {document.id}: a URL document needs a fetcher")
            source = self.fetched = fetch_url_source(
                document.url or "",
                document.crawl_depth,
                fetch,
                organization_id=document.organization_id,
            )
        content_type = MARKDOWN_CONTENT_TYPE if document.kind == "url" else document.content_type
        # The bytes go with this frame: the text is what follows; they stay in the database.
        return extract(
            source or b"",
            content_type=content_type,
            filename=document.filename,
            ocr=self.ocr,
            cpu=cpu_gate_for(embedder, len(source or b"")),
        ).text

    def _locked(self) -> KbDocument | IngestOutcome:
        """Take the document's lock and read it again, storing the fetched page: the
        document when this pass may write, else the outcome to return (re-submitted
        meanwhile, or finished by a concurrent run). Raises RecordMissing when it was
        deleted meanwhile."""
        session, document = self.session, self.document
        store.lock_document(session, document.organization_id, document.id)
        locked = self._current()
        if isinstance(locked, IngestOutcome) or self.fetched is None:
            return locked
        locked.source_bytes = self.fetched
        locked.content_type = MARKDOWN_CONTENT_TYPE
        locked.last_fetched_at = self.now
        locked.refresh_failures = 0
        interval = store.refresh_interval_of(session, locked, self.recrawl_interval)
        locked.next_refresh_at = next_refresh_time(self.now, interval, 0)
        return locked

    def _current(self) -> KbDocument | IngestOutcome:
        """Under the document's lock: the document as it is now when this pass's submission
        is still its own and in ``processing``, else the outcome to return. Raises
        RecordMissing when it was deleted meanwhile."""
        document = self.document
        locked = store.get_document(
            self.session, organization_id=document.organization_id, document_id=document.id
        )
        if locked.submitted_at != self.submitted_at:
            return _settled(self.session, locked, superseded=True)
        if locked.status != "processing":
            return _settled(self.session, locked, unchanged=True)
        return locked

    def failed(self, reason: str) -> IngestOutcome:
        locked = self._locked()
        if isinstance(locked, IngestOutcome):
            return locked
        locked.attempts += 1
        mark_failed(locked, reason, self.now)
        self.session.flush()
        return _settled(self.session, locked)

    def unchanged(self) -> IngestOutcome:
        locked = self._locked()
        if isinstance(locked, IngestOutcome):
            return locked
        # A re-upload may have changed who can see it, not what it says.
        store.set_chunk_audience(
            self.session, locked.organization_id, locked.id, list(locked.audience)
        )
        _mark_ready(self.session, locked, self.now, {"chunks": 0, "embedded": 0, "unchanged": True})
        self.session.flush()
        return _settled(self.session, locked, unchanged=True)

    def indexed(self, new: NewIndex) -> IngestOutcome:
        """Write ``new`` under the document's lock. Without a fetched page to store, the
        statement that writes is the check that the submission is still current
        (:func:`store.mark_indexed`), so the document is read again only when it was not."""
        session, document = self.session, self.document
        loaded: KbDocument | None = None
        if self.fetched is None:
            store.lock_document(session, document.organization_id, document.id)
        else:
            locked = self._locked()
            if isinstance(locked, IngestOutcome):
                return locked
            loaded = locked
        version = write_index(session, document, new, self.now, loaded)
        if version is None:
            why = self._current()
            if isinstance(why, IngestOutcome):
                return why
            raise Retryable(f"document {document.id}: its indexed state was not written")
        session.flush()
        return IngestOutcome(
            document.id, "ready", version, len(new.chunks), embedded=len(new.chunks)
        )


def _settled(
    session: Session,
    document: KbDocument | store.DocumentState,
    *,
    unchanged: bool = False,
    superseded: bool = False,
) -> IngestOutcome:
    return IngestOutcome(
        document_id=document.id,
        status=document.status,
        version=document.current_version,
        chunk_count=store.chunk_count(session, document.organization_id, document.id),
        failure_reason=document.failure_reason if document.status == "failed" else None,
        unchanged=unchanged,
        superseded=superseded,
    )


def mark_failed(document: KbDocument, reason: str, now: datetime) -> None:
    """Mark a locked document failed with a short reason (the caller counted the attempt)."""
    document.status = "failed"
    document.failure_reason = reason[:REASON_LENGTH]
    document.failed_at = now
    document.updated_at = now


def _mark_ready(
    session: Session, document: KbDocument, now: datetime, payload: Mapping[str, object]
) -> None:
    document.status = "ready"
    document.ready_at = now
    document.failure_reason = None
    document.failed_at = None
    document.attempts += 1
    document.updated_at = now
    store.record_usage_event(
        session,
        organization_id=document.organization_id,
        kind=store.INGESTED_EVENT,
        subject_id=document.id,
        payload={
            "knowledge_base_id": document.knowledge_base_id,
            "version": document.current_version,
            **payload,
        },
        now=now,
    )
