"""Recrawl and scheduled refresh of URL documents: one re-fetch of one ready document.

The storage side of seed 003's freshness machines. A re-fetch, successful or not, advances
the document's freshness clock (``last_fetched_at``), so a broken source cannot spin:

* unchanged content (same extracted-text hash): nothing is embedded; the clock advances
  and the next refresh is due one interval later;
* changed content: the fetched page becomes the document's source bytes and the document
  goes back to ``processing``; the ingestion family (serial per tenant, like uploads)
  re-indexes and versions it (cause ``refresh`` when its base has a refresh schedule, else
  ``recrawl``), and its old chunks serve until then;
* a failure (unreachable, redirecting, unreadable): the document stays ready with its old
  content, ``refresh_failures`` grows and the next try waits ``interval * 2**failures``
  (capped at a week).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy.orm import Session

from services.indexing.digests import text_hash
from services.ingestion import store
from services.ingestion.feeds import RSS_CONNECTOR, FeedUnreadable, feed_document_source
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
from shared.errors import Retryable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefreshOutcome:
    """What one re-fetch did.

    Attributes:
      result: ``unchanged`` (clock advanced), ``changed`` (back to processing: enqueue its
        ingestion), ``failed`` (clock advanced, backed off) or ``skipped`` (not a ready URL
        document any more).
      reason: why it failed.
    """

    document_id: int
    result: Literal["unchanged", "changed", "failed", "skipped"]
    reason: str | None = None


def _locked_if_ready(
    session: Session, organization_id: int, document_id: int, submitted_at: datetime
) -> KbDocument | None:
    document = store.locked_document(
        session, organization_id=organization_id, document_id=document_id
    )
    if document.status != "ready" or document.submitted_at != submitted_at:
        return None
    return document


def refresh_document(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    fetch: PageFetch,
    now: datetime,
    recrawl_interval_seconds: float = DEFAULT_RECRAWL_INTERVAL_SECONDS,
    fetch_feed: FeedFetch | None = None,
) -> RefreshOutcome:
    """Re-fetch a ready URL document and record the result (the caller commits, then
    enqueues ``ingest-document-<id>`` for a ``changed`` outcome).

    Raises:
      RecordMissing: the document is missing, deleted or another tenant's.
      Delay: the host asked to wait; nothing was recorded.
    """
    from services.indexing.extract import ExtractionFailed, extract

    document = store.get_document(session, organization_id=organization_id, document_id=document_id)
    if document.kind != "url" or document.status != "ready" or not document.url:
        return RefreshOutcome(document_id, "skipped")
    submitted_at = document.submitted_at
    interval = store.refresh_interval_of(session, document, recrawl_interval_seconds)
    scheduled = (
        store.get_knowledge_base(
            session,
            organization_id=organization_id,
            knowledge_base_id=document.knowledge_base_id,
        ).refresh_schedule
        is not None
    )
    try:
        if document.connector == RSS_CONNECTOR and fetch_feed is not None:
            # A feed: its entries' documents are added or refreshed in this transaction.
            fetched = feed_document_source(session, document, fetch_feed, now)
        else:
            fetched = fetch_url_source(
                document.url, document.crawl_depth, fetch, organization_id=organization_id
            )
        text = extract(fetched, content_type=MARKDOWN_CONTENT_TYPE, filename=None).text
    except (FetchFailed, ExtractionFailed, FeedUnreadable, Retryable) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        locked = _locked_if_ready(session, organization_id, document_id, submitted_at)
        if locked is None:
            return RefreshOutcome(document_id, "skipped")
        locked.refresh_failures += 1
        locked.last_fetched_at = now
        locked.next_refresh_at = next_refresh_time(now, interval, locked.refresh_failures)
        session.flush()
        log.info("refresh of document %s failed (%s): %s", document_id, exc, reason)
        return RefreshOutcome(document_id, "failed", reason)

    locked = _locked_if_ready(session, organization_id, document_id, submitted_at)
    if locked is None:
        return RefreshOutcome(document_id, "skipped")
    locked.last_fetched_at = now
    locked.refresh_failures = 0
    locked.next_refresh_at = next_refresh_time(now, interval, 0)
    if text_hash(text) == locked.content_hash:
        session.flush()
        return RefreshOutcome(document_id, "unchanged")
    locked.source_bytes = fetched
    locked.content_type = MARKDOWN_CONTENT_TYPE
    # The base's own schedule refreshed it; without one, the platform's recrawl did.
    store.resubmit(locked, now, cause="refresh" if scheduled else "recrawl")
    session.flush()
    return RefreshOutcome(document_id, "changed")
