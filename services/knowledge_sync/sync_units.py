"""The sync units (a source's listing, a document's content, a document's chunks) as plain
functions of a session and an organization id; the crawl's units are ``crawl_units.py``.

Each run writes the Rails tables in the caller's transaction and returns its follow-up
requests; the actor commits first and enqueues after (durable follow-ups), so a retry of a
unit re-derives the same deterministic child ids from the database instead of trusting a
provider's "unchanged".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from router.requests import JobRequest
from services.connectors.base import (
    ConfirmsRemoval,
    LeaveUntouched,
    ListedDocument,
    Listing,
    ListingPart,
    ResumableListing,
    SourceConfig,
    SourceProvider,
)
from services.indexing.index_writer import remove_document_index, replace_document_index
from services.knowledge_sync import store
from services.knowledge_sync.crawl_units import CRAWLED_SOURCE_TYPES, plan_source_crawl
from services.knowledge_sync.families import document_request
from services.knowledge_sync.resumable_sync import discard_untouched, run_resumable_listing
from shared.db.models.rails import KnowledgeBaseDocument, KnowledgeBaseSource
from shared.db.tenant import require_scoped
from shared.errors import RecordMissing, Unrecoverable

#: At most this many documents missing from a listing are proven gone per source run (a
#: request each); the rest are kept and proven on later runs.
MAX_REMOVAL_PROOFS = 50

#: ``document_chunks.source_type`` (and ``pg_search_documents.searchable_type``) of synced
#: documents, as in Rails.
CHUNK_SOURCE_TYPE = "KnowledgeBaseDocument"


@dataclass(frozen=True)
class SyncContext:
    """What the sync units need besides a session: provider clients and how to reach them.

    Attributes:
      providers: source type -> client.
      provider_urls: source type -> base URL, from configuration (wins over the source's
        ``base_url`` setting and the client's default).
      default_url: ``(source type, settings) -> the provider's production base URL``.
      timeout: seconds per HTTP request.
      chunker / embedder: the shared chunk/embed/index component.
    """

    providers: Mapping[str, SourceProvider]
    provider_urls: Mapping[str, str]
    default_url: Callable[[str, Mapping[str, Any]], str]
    timeout: float
    chunker: Any
    embedder: Any

    def provider_for(self, source_type: str) -> SourceProvider:
        provider = self.providers.get(source_type)
        if provider is None:
            raise Unrecoverable(f"unknown knowledge base source type {source_type!r}")
        return provider

    def config_for(
        self, session: Session, organization_id: int, source: KnowledgeBaseSource
    ) -> SourceConfig:
        settings = store.source_settings(session, organization_id, source)
        base_url = (
            self.provider_urls.get(source.type)
            or settings.get("base_url")
            or self.default_url(source.type, settings)
        )
        return SourceConfig(
            source_id=source.id,
            organization_id=organization_id,
            source_type=source.type,
            base_url=str(base_url),
            settings=settings,
            timeout=self.timeout,
        )


def discard_document(
    session: Session, organization_id: int, row: KnowledgeBaseDocument, now: datetime
) -> None:
    """Discard a document and take it out of retrieval in the same transaction. Its chunks
    are gone, so ``chunks_synced_at`` is cleared: a document reclaimed later is chunked again
    (by its source run's follow-ups or the recovery sweep) instead of staying unsearchable."""
    row.discarded_at = now
    row.chunks_synced_at = None
    row.updated_at = now
    remove_document_index(
        session, organization_id=organization_id, source_type=CHUNK_SOURCE_TYPE, source_id=row.id
    )


def run_source_sync(
    session: Session, ctx: SyncContext, *, organization_id: int, source_id: int, now: datetime
) -> list[JobRequest]:
    """List the source, upsert its sections and documents, discard what a complete listing no
    longer has, and return the follow-ups: a document sync for every kept document the
    provider must still fetch (never synced, or changed upstream) and a chunk sync for every
    kept document with content but no chunks."""
    source = store.live_source(session, organization_id, source_id)
    if source.type in CRAWLED_SOURCE_TYPES:
        return plan_source_crawl(session, organization_id, source, now)
    provider = ctx.provider_for(source.type)
    config = ctx.config_for(session, organization_id, source)
    if isinstance(provider, ResumableListing):
        return _run_resumable(session, provider, provider, config, organization_id, source, now)
    listing = provider.list_source(config)

    sections = store.upsert_sections(session, organization_id, source, listing.sections, now)
    existing = store.documents_of_source(session, organization_id, source.id)
    listed: dict[str, ListedDocument] = {}
    for item in listing.documents:
        row = store.upsert_document(
            session, organization_id, source, existing.get(item.identifier), item, now
        )
        existing[item.identifier] = row
        listed[item.identifier] = item
    session.flush()
    for identifier, item in listed.items():
        section_ids = [sections[s].id for s in item.section_identifiers if s in sections]
        store.link_sections(session, organization_id, existing[identifier], section_ids, now)

    if listing.complete:
        missing = [
            identifier
            for identifier, row in existing.items()
            if identifier not in listed and row.discarded_at is None
        ]
        for identifier in _proven_gone(provider, config, listing, missing):
            discard_document(session, organization_id, existing[identifier], now)
        store.discard_sections_except(
            session,
            organization_id,
            source.id,
            set(sections) & {s.identifier for s in listing.sections},
            now,
        )
    store.mark_source_synced(source, now)
    session.flush()
    return _follow_ups(organization_id, source, provider, existing, listed)


def _run_resumable(
    session: Session,
    provider: SourceProvider,
    pages: ResumableListing,
    config: SourceConfig,
    organization_id: int,
    source: KnowledgeBaseSource,
    now: datetime,
) -> list[JobRequest]:
    """:func:`run_source_sync` for a provider whose listing resumes across delays
    (``resumable_sync``): each page is written as it comes; the removal pass runs once the
    last page is read."""

    existing = store.documents_of_source(session, organization_id, source.id)

    def apply(part: ListingPart, started: datetime) -> None:
        sections = store.upsert_sections(session, organization_id, source, part.sections, now)
        for item in part.documents:
            row = existing.get(item.identifier)
            if (
                part.fills_gaps
                and row is not None
                and row.discarded_at is None
                and row.updated_at >= started
            ):
                continue  # this pass listed the document in its own right
            row = store.upsert_document(session, organization_id, source, row, item, now)
            existing[item.identifier] = row
            session.flush()
            section_ids = [sections[s].id for s in item.section_identifiers if s in sections]
            store.link_sections(session, organization_id, row, section_ids, now)
        session.flush()

    started, complete = run_resumable_listing(
        session,
        pages,
        config,
        organization_id=organization_id,
        source=source,
        now=now,
        apply=apply,
    )
    if complete:
        discard_untouched(
            session,
            organization_id,
            source,
            started,
            now,
            lambda row: discard_document(session, organization_id, row, now),
        )
    store.mark_source_synced(source, now)
    session.flush()
    every = store.documents_of_source(session, organization_id, source.id)
    return _follow_ups(organization_id, source, provider, every, {})


def _proven_gone(
    provider: SourceProvider, config: SourceConfig, listing: Listing, missing: list[str]
) -> list[str]:
    """The documents missing from a complete ``listing`` that may be discarded: all of them
    when the listing is authoritative; otherwise those the provider proves gone, one by one
    (at most :data:`MAX_REMOVAL_PROOFS` a run; a provider that cannot prove removals keeps
    everything)."""
    if not listing.removal_needs_proof:
        return missing
    if not missing or not isinstance(provider, ConfirmsRemoval):
        return []
    # A random sample: documents that stay missing but alive cannot starve the others.
    sample = random.sample(missing, min(len(missing), MAX_REMOVAL_PROOFS))
    gone = provider.confirm_gone(config, sample)
    return [identifier for identifier in missing if identifier in gone]


def _follow_ups(
    organization_id: int,
    source: KnowledgeBaseSource,
    provider: SourceProvider,
    existing: Mapping[str, KnowledgeBaseDocument],
    listed: Mapping[str, ListedDocument],
) -> list[JobRequest]:
    """A document sync for every kept document the provider must still fetch (never synced,
    or changed upstream), else a chunk sync for every kept one with content but no chunks."""
    follow_ups: list[JobRequest] = []
    for identifier, row in existing.items():
        if row.discarded_at is not None:
            continue
        seen = listed.get(identifier)
        changed_upstream = (
            seen is not None
            and seen.updated_at is not None
            and row.last_synced_at is not None
            and seen.updated_at > row.last_synced_at
        )
        if provider.fetches_documents and (row.last_synced_at is None or changed_upstream):
            follow_ups.append(document_request("sync_document", organization_id, row.id, source))
        elif row.chunks_synced_at is None and row.content:
            follow_ups.append(
                document_request("sync_document_chunks", organization_id, row.id, None)
            )
    return follow_ups


def run_document_sync(
    session: Session, ctx: SyncContext, *, organization_id: int, document_id: int, now: datetime
) -> list[JobRequest]:
    """Fetch one document's content (a provider 404 discards it), then re-read the row and
    return a chunk sync while it has content and no chunks."""
    row = require_scoped(
        session, KnowledgeBaseDocument, document_id, organization_id=organization_id
    )
    if row.discarded_at is not None:
        raise RecordMissing(f"knowledge base document {document_id} is discarded")
    if row.knowledge_base_source_id is not None:
        source = store.live_source(session, organization_id, row.knowledge_base_source_id)
        provider = ctx.provider_for(source.type)
        try:
            fetched = provider.fetch_document(
                ctx.config_for(session, organization_id, source), row.source_identifier
            )
        except LeaveUntouched:
            return []
        if fetched is None:
            discard_document(session, organization_id, row, now)
            return []
        store.store_content(row, fetched.title, fetched.content, now)
        row.url = fetched.url or row.url
    session.flush()
    session.refresh(row)
    if row.discarded_at is None and row.chunks_synced_at is None and row.content:
        return [document_request("sync_document_chunks", organization_id, row.id, None)]
    return []


def run_document_chunks(
    session: Session, ctx: SyncContext, *, organization_id: int, document_id: int, now: datetime
) -> int:
    """Replace the document's chunks and search row in the caller's transaction; returns the
    chunk count. ``chunks_synced_at`` is set only if the content indexed is still current."""
    row = require_scoped(
        session, KnowledgeBaseDocument, document_id, organization_id=organization_id
    )
    if row.discarded_at is not None or not row.content:
        remove_document_index(
            session,
            organization_id=organization_id,
            source_type=CHUNK_SOURCE_TYPE,
            source_id=row.id,
        )
        if row.discarded_at is not None:
            raise RecordMissing(f"knowledge base document {document_id} is discarded")
        row.chunks_synced_at = now
        return 0
    indexed_hash = row.content_hash
    outcome = replace_document_index(
        session,
        organization_id=organization_id,
        source_type=CHUNK_SOURCE_TYPE,
        source_id=row.id,
        title=row.title or "",
        content=row.content,
        chunker=ctx.chunker,
        embedder=ctx.embedder,
    )
    store.mark_chunks_synced(session, organization_id, row.id, indexed_hash, now)
    return int(outcome.chunk_count)
