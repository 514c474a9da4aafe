"""The ingestion pipeline: one document from ``processing`` to ``ready`` or ``failed``.

:func:`ingest_document` extracts text from the document's stored source bytes (fetching a
URL document first), and compares the text's hash with the indexed one: unchanged content
with a complete chunk set made by the same chunker and embedder embeds nothing. Otherwise
it chunks and embeds *before* taking the document's lock, then, in the caller's
transaction, writes the new version, replaces the chunk set (delete + insert) and marks the
document ready with a usage event, so readers see the old chunk set or the new one, never
half of either. Concurrent runs serialise on the lock; a run that finds the work done (or
the document re-submitted or deleted meanwhile) writes nothing.

Failures: an extraction failure (or an unreachable, redirecting or oversize URL) marks the
document ``failed`` with a short reason at once; no retry can fix the same bytes. A
transient error propagates for the platform to retry, and :func:`run_ingestion` verifies
the terminal state after every unsuccessful attempt: on the last one the document is
marked failed, so nothing stays in ``processing`` forever. A failed replacement leaves the
previous version's chunk set (``current_version``) in place.

Versions: each content that becomes current is written once to ``kb_document_versions``
as version ``current_version + 1``; the current version and the ten most recent superseded
ones are kept. :func:`request_rollback` makes a kept version's content the document's
source again, for this pipeline to make it current (under a new version number: history
records what replaced what).

Re-fetching ready URL documents (recrawl, scheduled refresh) is
:mod:`services.ingestion.refresh`; a changed page comes back through this pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunk_batches import PackedVector, embed_chunks
from services.indexing.chunking import Chunk
from services.indexing.digests import text_hash
from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker, index_fingerprint
from services.indexing.kb_chunks import replace_kb_chunks
from services.ingestion import store
from services.ingestion.fetching import (
    DEFAULT_RECRAWL_INTERVAL_SECONDS,
    MARKDOWN_CONTENT_TYPE,
    fetch_url_source,
    next_refresh_time,
    refresh_interval_seconds,
)
from services.web.failures import FetchFailed, TransientFailure
from services.web.fetch import PageFetch
from shared.db.engine import session_scope
from shared.db.models.ingestion import KbChunk, KbDocument, KbDocumentVersion
from shared.db.vector import embedding_storage
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable

log = logging.getLogger(__name__)

#: Attempts one submission may take across re-enqueues before it is failed regardless.
MAX_TOTAL_ATTEMPTS = 9
#: Times one job starts over when the document was re-submitted while it ran.
MAX_SUPERSEDED_ROUNDS = 3
NO_TEXT = "no extractable text"
_REASON_LENGTH = 200


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


# -- the ingestion pass --------------------------------------------------------------------


def _chunk_count(session: Session, organization_id: int, document_id: int) -> int:
    return int(
        session.scalar(
            select(func.count()).where(
                KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
            )
        )
        or 0
    )


def _has_chunks(session: Session, organization_id: int, document_id: int) -> bool:
    return bool(
        session.scalar(
            select(
                exists().where(
                    KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
                )
            )
        )
    )


def _settled(
    session: Session, document: KbDocument, *, unchanged: bool = False, superseded: bool = False
) -> IngestOutcome:
    return IngestOutcome(
        document_id=document.id,
        status=document.status,
        version=document.current_version,
        chunk_count=_chunk_count(session, document.organization_id, document.id),
        failure_reason=document.failure_reason if document.status == "failed" else None,
        unchanged=unchanged,
        superseded=superseded,
    )


def _relock(
    session: Session, organization_id: int, document_id: int, submitted_at: datetime
) -> KbDocument | IngestOutcome:
    """Take the document's lock and read it again: the document when this pass may write,
    else the outcome to return (re-submitted meanwhile, or finished by a concurrent run).

    Raises RecordMissing when it was deleted meanwhile."""
    store.lock_document(session, organization_id, document_id)
    document = store.get_document(session, organization_id=organization_id, document_id=document_id)
    if document.submitted_at != submitted_at:
        return _settled(session, document, superseded=True)
    if document.status != "processing":
        return _settled(session, document, unchanged=True)
    return document


def refresh_interval_of(session: Session, document: KbDocument, recrawl_interval: float) -> float:
    """Seconds between two fetches of a URL document: the recrawl interval, or its base's
    refresh schedule when sooner."""
    base = store.get_knowledge_base(
        session,
        organization_id=document.organization_id,
        knowledge_base_id=document.knowledge_base_id,
    )
    return refresh_interval_seconds(base.refresh_schedule, recrawl_interval)


def _store_fetched(
    session: Session,
    document: KbDocument,
    fetched: bytes | None,
    now: datetime,
    recrawl_interval: float,
) -> None:
    if fetched is None:
        return
    document.source_bytes = fetched
    document.content_type = MARKDOWN_CONTENT_TYPE
    document.last_fetched_at = now
    document.refresh_failures = 0
    interval = refresh_interval_of(session, document, recrawl_interval)
    document.next_refresh_at = next_refresh_time(now, interval, 0)


def _fail(document: KbDocument, reason: str, now: datetime) -> None:
    """Mark the document failed (the caller has counted the attempt)."""
    document.status = "failed"
    document.failure_reason = reason[:_REASON_LENGTH]
    document.failed_at = now
    document.updated_at = now


def _check_dimensions(session: Session, embedder: Embedder) -> None:
    storage = embedding_storage(session)
    if storage.dims is not None and storage.dims != embedder.dimensions:
        raise Unrecoverable(
            f"embedder {embedder.name} makes {embedder.dimensions}-dimensional vectors but "
            f"kb_chunks.embedding is vector({storage.dims}); a migration must change it"
        )


def _embed(
    session: Session, chunker: DocumentChunker, embedder: Embedder, text: str
) -> tuple[list[Chunk], list[PackedVector]]:
    chunks = chunker.split(text)
    if not chunks:
        return [], []
    _check_dimensions(session, embedder)
    return chunks, embed_chunks(embedder, chunks)


@dataclass(frozen=True)
class _NewIndex:
    text: str
    digest: str
    fingerprint: str
    chunks: list[Chunk]
    vectors: list[PackedVector]


def _write_index(session: Session, document: KbDocument, new: _NewIndex, now: datetime) -> int:
    """Write ``new`` as the document's current content and chunk set; returns the version.

    Content equal to the current version's (only the chunker or embedder changed) keeps
    its version; anything else becomes version ``current_version + 1``, and versions older
    than the retained ten superseded ones are deleted.
    """
    organization_id, document_id = document.organization_id, document.id
    version = document.current_version
    if new.digest != document.content_hash or version == 0:
        version += 1
        session.add(
            KbDocumentVersion(
                organization_id=organization_id,
                document_id=document_id,
                version=version,
                content=new.text,
                content_hash=new.digest,
                created_at=now,
            )
        )
        session.execute(
            delete(KbDocumentVersion).where(
                KbDocumentVersion.organization_id == organization_id,
                KbDocumentVersion.document_id == document_id,
                KbDocumentVersion.version < version - store.RETAINED_SNAPSHOTS,
            ),
            execution_options={"synchronize_session": False},
        )
    replace_kb_chunks(
        session,
        organization_id=organization_id,
        knowledge_base_id=document.knowledge_base_id,
        document_id=document_id,
        chunks=new.chunks,
        vectors=new.vectors,
        audience=list(document.audience),
        created_at=now,
    )
    document.content_hash = new.digest
    document.index_fingerprint = new.fingerprint
    document.current_version = version
    return version


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
) -> IngestOutcome:
    """Run one ingestion pass over a document in ``processing``, in the caller's transaction
    (the caller commits). A document in another status is left as it is.

    Parameters:
      chunker / embedder: the shared chunk/embed component.
      now: the time written as ``ready_at``, ``failed_at`` or ``last_fetched_at``.
      fetch: fetches a page (``services.web.fetch.page_fetcher``); needed for a URL document whose
        page has not been stored yet.
      recrawl_interval_seconds: a fetched URL document's next refresh is due after this
        (or its base's schedule, when sooner).

    Returns:
      the :class:`IngestOutcome`; a terminal failure is an outcome, not an exception.

    Raises:
      RecordMissing: the document is missing, deleted or another tenant's.
      Delay / Retryable: transient; nothing was written (see :func:`run_ingestion`).
      Unrecoverable: the embedder's vectors cannot be stored (dimension mismatch).
    """
    from services.indexing.extract import ExtractionFailed, extract

    document = store.get_document(session, organization_id=organization_id, document_id=document_id)
    if document.status != "processing":
        return _settled(session, document, unchanged=True)
    submitted_at = document.submitted_at
    fetched = None
    source = store.read_source(session, organization_id=organization_id, document_id=document_id)
    try:
        if document.kind == "url" and source is None:
            if fetch is None:
                raise Unrecoverable(f"document {document_id}: a URL document needs a fetcher")
            source = fetched = fetch_url_source(
                document.url or "", document.crawl_depth, fetch, organization_id=organization_id
            )
        content_type = MARKDOWN_CONTENT_TYPE if document.kind == "url" else document.content_type
        extracted = extract(source or b"", content_type=content_type, filename=document.filename)
        source = None  # the text is what follows; the bytes stay in the database
    except (FetchFailed, ExtractionFailed) as exc:
        return _finish_failed(
            session, document, submitted_at, exc.reason, fetched, now, recrawl_interval_seconds
        )

    new_digest = text_hash(extracted.text)
    fingerprint = index_fingerprint(chunker, embedder)
    if (
        new_digest == document.content_hash
        and fingerprint == document.index_fingerprint
        and _has_chunks(session, organization_id, document_id)
    ):
        return _finish_unchanged(
            session, document, submitted_at, fetched, now, recrawl_interval_seconds
        )

    chunks, vectors = _embed(session, chunker, embedder, extracted.text)
    if not chunks:
        return _finish_failed(
            session, document, submitted_at, NO_TEXT, fetched, now, recrawl_interval_seconds
        )
    new = _NewIndex(extracted.text, new_digest, fingerprint, chunks, vectors)
    locked = _relock(session, organization_id, document_id, submitted_at)
    if isinstance(locked, IngestOutcome):
        return locked
    _store_fetched(session, locked, fetched, now, recrawl_interval_seconds)
    version = _write_index(session, locked, new, now)
    tokens = sum(chunk.token_count for chunk in chunks)
    payload = {"chunks": len(chunks), "tokens": tokens, "embedded": len(chunks)}
    _mark_ready(session, locked, now, payload)
    session.flush()
    return IngestOutcome(document_id, "ready", version, len(chunks), embedded=len(chunks))


def _finish_failed(
    session: Session,
    document: KbDocument,
    submitted_at: datetime,
    reason: str,
    fetched: bytes | None,
    now: datetime,
    recrawl_interval: float,
) -> IngestOutcome:
    locked = _relock(session, document.organization_id, document.id, submitted_at)
    if isinstance(locked, IngestOutcome):
        return locked
    _store_fetched(session, locked, fetched, now, recrawl_interval)
    locked.attempts += 1
    _fail(locked, reason, now)
    session.flush()
    return _settled(session, locked)


def _finish_unchanged(
    session: Session,
    document: KbDocument,
    submitted_at: datetime,
    fetched: bytes | None,
    now: datetime,
    recrawl_interval: float,
) -> IngestOutcome:
    locked = _relock(session, document.organization_id, document.id, submitted_at)
    if isinstance(locked, IngestOutcome):
        return locked
    _store_fetched(session, locked, fetched, now, recrawl_interval)
    # A re-upload may have changed who can see it, not what it says.
    session.execute(
        update(KbChunk)
        .where(
            KbChunk.organization_id == locked.organization_id,
            KbChunk.document_id == locked.id,
            KbChunk.audience != list(locked.audience),
        )
        .values(audience=list(locked.audience)),
        execution_options={"synchronize_session": False},
    )
    _mark_ready(session, locked, now, {"chunks": 0, "embedded": 0, "unchanged": True})
    session.flush()
    return _settled(session, locked, unchanged=True)


# -- after an unsuccessful attempt ---------------------------------------------------------


def failure_reason_for(error: BaseException, attempts: int) -> str:
    """The short, user-facing reason a document fails with after ``error``."""
    if isinstance(error, TransientFailure):
        return error.reason
    if isinstance(error, Retryable):
        return f"temporary failure persisted after {attempts} attempts: {error}"[:_REASON_LENGTH]
    if isinstance(error, Unrecoverable):
        return f"ingestion failed: {error}"[:_REASON_LENGTH]
    # Unexpected errors may carry internals (SQL, paths): name the type only.
    return f"internal error after {attempts} attempts ({type(error).__name__})"


def record_failed_attempt(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    submitted_at: datetime,
    error: BaseException,
    final: bool,
    now: datetime,
) -> str | None:
    """Verify the terminal state after an attempt that raised ``error``: count the attempt
    and, when no retry will follow (``final``, or :data:`MAX_TOTAL_ATTEMPTS` reached across
    re-enqueues), mark the document failed. A document re-submitted, deleted or settled
    meanwhile is left alone. The caller commits.

    Returns:
      the failure reason written, or None when the document stays as it is.
    """
    store.lock_document(session, organization_id, document_id)
    try:
        document = store.get_document(
            session, organization_id=organization_id, document_id=document_id
        )
    except RecordMissing:
        return None
    if document.status != "processing" or document.submitted_at != submitted_at:
        return None
    document.attempts += 1
    if not final and document.attempts < MAX_TOTAL_ATTEMPTS:
        session.flush()
        return None
    reason = failure_reason_for(error, document.attempts)
    _fail(document, reason, now)
    session.flush()
    log.warning("document %s failed after attempt %s: %s", document_id, document.attempts, reason)
    return reason


def run_ingestion(
    sessions: sessionmaker[Session],
    *,
    organization_id: int,
    document_id: int,
    chunker: DocumentChunker,
    embedder: Embedder,
    final_attempt: bool,
    now: datetime,
    fetch: PageFetch | None = None,
    recrawl_interval_seconds: float = DEFAULT_RECRAWL_INTERVAL_SECONDS,
) -> IngestOutcome:
    """The ingestion job's body: :func:`ingest_document` in its own committed unit of work,
    then, if it raised, :func:`record_failed_attempt` in another before re-raising (the
    platform retries per the family's policy). A pass superseded by a re-submission starts
    over, up to :data:`MAX_SUPERSEDED_ROUNDS` times (then the sweep tick takes it up).

    Parameters:
      final_attempt: no retry follows this attempt (``tiers.attempts.current_attempt``).

    Raises:
      RecordMissing: the document is missing, deleted or another tenant's.
      Delay: re-delivered later without spending the attempt; nothing to verify.
      any other error of the pass, after its attempt was recorded.
    """
    outcome: IngestOutcome | None = None
    for _ in range(MAX_SUPERSEDED_ROUNDS):
        with session_scope(sessions) as session:
            submitted_at = store.get_document(
                session, organization_id=organization_id, document_id=document_id
            ).submitted_at
        try:
            with session_scope(sessions) as session:
                outcome = ingest_document(
                    session,
                    organization_id=organization_id,
                    document_id=document_id,
                    chunker=chunker,
                    embedder=embedder,
                    now=now,
                    fetch=fetch,
                    recrawl_interval_seconds=recrawl_interval_seconds,
                )
                session.commit()
        except (Delay, RecordMissing):
            raise
        except Exception as exc:
            with session_scope(sessions) as session:
                record_failed_attempt(
                    session,
                    organization_id=organization_id,
                    document_id=document_id,
                    submitted_at=submitted_at,
                    error=exc,
                    final=final_attempt or isinstance(exc, Unrecoverable),
                    now=now,
                )
                session.commit()
            raise
        if not outcome.superseded:
            return outcome
    assert outcome is not None
    return outcome


# -- rollback ------------------------------------------------------------------------------


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
    store.lock_document(session, organization_id, document_id)
    document = store.get_document(session, organization_id=organization_id, document_id=document_id)
    if document.status == "processing":
        raise store.DocumentBusy(f"document {document_id} is being ingested")
    if (
        document.status == "ready"
        and kept.content_hash == document.content_hash
        and index_fingerprint(chunker, embedder) == document.index_fingerprint
        and _has_chunks(session, organization_id, document_id)
    ):
        return False
    document.source_bytes = kept.content.encode()
    document.content_type = MARKDOWN_CONTENT_TYPE
    store.resubmit(document, now)
    session.flush()
    return True
