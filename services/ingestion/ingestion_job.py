"""The ingestion job's body: a pipeline pass in its own unit of work, and after a pass that
raised, the attempt counted and, when no retry follows, the document failed.

A transient error (``Retryable``, a lost connection) propagates for the platform to retry
per the family's policy; :func:`record_failed_attempt` runs after every unsuccessful
attempt so nothing stays in ``processing`` forever: on the last one (or after
:data:`MAX_TOTAL_ATTEMPTS` across re-enqueues) the document is marked failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker
from services.indexing.ocr import DEFAULT_OCR_LIMITS, OcrLimits
from services.ingestion import store
from services.ingestion.pipeline import REASON_LENGTH, IngestOutcome, ingest_document, mark_failed
from services.ingestion.url_sources import DEFAULT_RECRAWL_INTERVAL_SECONDS
from services.web.failures import TransientFailure
from services.web.feed_fetch import FeedFetch
from services.web.fetch import PageFetch
from shared.db.engine import session_scope
from shared.errors import Delay, DelaysExhausted, RecordMissing, Retryable, Unrecoverable

log = logging.getLogger(__name__)

#: Attempts one submission may take across re-enqueues before it is failed regardless.
MAX_TOTAL_ATTEMPTS = 9
#: Times one job starts over when the document was re-submitted while it ran.
MAX_SUPERSEDED_ROUNDS = 3


def failure_reason_for(error: BaseException, attempts: int) -> str:
    """The short, user-facing reason a document fails with after ``error``."""
    if isinstance(error, TransientFailure):
        return error.reason
    if isinstance(error, Retryable):
        return f"temporary failure persisted after {attempts} attempts: {error}"[:REASON_LENGTH]
    if isinstance(error, Unrecoverable):
        return f"ingestion failed: {error}"[:REASON_LENGTH]
    # Unexpected errors may carry internals (SQL, paths): name the type only.
    return f"internal error after {attempts} attempts ({type(error).__name__})"


def record_failed_attempt(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    submitted_at: datetime | None,
    error: BaseException,
    final: bool,
    now: datetime,
) -> str | None:
    """Verify the terminal state after an attempt that raised ``error``: count the attempt
    and, when no retry will follow (``final``, or :data:`MAX_TOTAL_ATTEMPTS` reached across
    re-enqueues), mark the document failed. A document re-submitted (``submitted_at`` is
    the submission the attempt read; None when it failed before reading one, and then the
    attempt counts against the current one), deleted or settled meanwhile is left alone.
    The caller commits.

    Returns:
      the failure reason written, or None when the document stays as it is.
    """
    try:
        document = store.locked_document(
            session, organization_id=organization_id, document_id=document_id
        )
    except RecordMissing:
        return None
    resubmitted = submitted_at is not None and document.submitted_at != submitted_at
    if document.status != "processing" or resubmitted:
        return None
    document.attempts += 1
    if not final and document.attempts < MAX_TOTAL_ATTEMPTS:
        session.flush()
        return None
    reason = failure_reason_for(error, document.attempts)
    mark_failed(document, reason, now)
    session.flush()
    log.warning("document %s failed after attempt %s: %s", document_id, document.attempts, reason)
    return reason


def _record_failure(
    sessions: sessionmaker[Session],
    organization_id: int,
    document_id: int,
    submitted_at: datetime | None,
    error: Exception,
    now: datetime,
    final_attempt: bool,
) -> None:
    with session_scope(sessions) as session:
        record_failed_attempt(
            session,
            organization_id=organization_id,
            document_id=document_id,
            submitted_at=submitted_at,
            error=error,
            final=final_attempt or isinstance(error, Unrecoverable),
            now=now,
        )
        session.commit()


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
    ocr: OcrLimits = DEFAULT_OCR_LIMITS,
    fetch_feed: FeedFetch | None = None,
    delay_ends_job: Callable[[Delay], bool] = lambda _delay: False,
) -> IngestOutcome:
    """:func:`~services.ingestion.pipeline.ingest_document` in its own committed unit of
    work, then, if it raised, :func:`record_failed_attempt` in another before re-raising
    (the platform retries per the family's policy). A pass superseded by a re-submission
    starts over, up to :data:`MAX_SUPERSEDED_ROUNDS` times (then the sweep tick takes it up).

    Parameters:
      final_attempt: no retry follows this attempt (``tiers.attempts.current_attempt``).
      delay_ends_job: whether a delay now would fail the job for good (its streak of
        provider delays passed the family's limit on the last attempt:
        ``Attempt.delay_ends_job``); the document is then failed before the delay is
        re-raised, so a provider answering 429 forever cannot keep it in ``processing``.

    Raises:
      RecordMissing: the document is missing, deleted or another tenant's.
      Delay: re-delivered later without spending the attempt; nothing to verify (unless
        ``delay_ends_job``: the document was failed first).
      any other error of the pass, after its attempt was recorded.
    """
    outcome: IngestOutcome | None = None
    for _ in range(MAX_SUPERSEDED_ROUNDS):
        # The submission this attempt works on, read in the pass's own transaction (its
        # first statement); None when the attempt failed before reading it.
        submitted_at: datetime | None = None
        try:
            with session_scope(sessions) as session:
                read = store.read_document(
                    session, organization_id=organization_id, document_id=document_id
                )
                submitted_at = read.document.submitted_at
                outcome = ingest_document(
                    session,
                    organization_id=organization_id,
                    document_id=document_id,
                    read=read,
                    chunker=chunker,
                    embedder=embedder,
                    now=now,
                    fetch=fetch,
                    recrawl_interval_seconds=recrawl_interval_seconds,
                    ocr=ocr,
                    fetch_feed=fetch_feed,
                )
                session.commit()
        except RecordMissing:
            raise
        except Delay as delay:
            if delay_ends_job(delay):
                exhausted = DelaysExhausted(f"the provider kept asking to wait ({delay.reason})")
                _record_failure(
                    sessions, organization_id, document_id, submitted_at, exhausted, now, True
                )
            raise
        except Exception as exc:
            _record_failure(
                sessions, organization_id, document_id, submitted_at, exc, now, final_attempt
            )
            raise
        if not outcome.superseded:
            return outcome
    assert outcome is not None
    return outcome
