"""The knowledge sync's SQL for one source run and its checks: every statement takes and
filters on organization_id. The daily scan's cross-tenant listings are in
:mod:`services.knowledge_sync.daily_scan`, the enqueue route's lookups in
:mod:`services.knowledge_sync.unit_routing`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, or_, select, true, update
from sqlalchemy.orm import Session

from services.connectors.base import ListedDocument, ListedSection
from services.indexing.digests import content_hash
from shared.db.models.rails import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseDocument,
    KnowledgeBaseDocumentSection,
    KnowledgeBaseSection,
    KnowledgeBaseSource,
    OrganizationDataSource,
)
from shared.db.tenant import organization_filter, require_scoped, select_scoped

#: Sources the pipeline never syncs (Intercom content comes from elsewhere).
EXCLUDED_SOURCE_TYPES = ("intercom",)
#: A crawl task in these states is continued by its source's next sync, not replaced.
UNFINISHED_CRAWL_STATES = ("pending", "running")


def live_source(session: Session, organization_id: int, source_id: int) -> KnowledgeBaseSource:
    """The source, or RecordMissing when it is missing, discarded or another tenant's."""
    source = require_scoped(
        session, KnowledgeBaseSource, source_id, organization_id=organization_id
    )
    if source.discarded_at is not None:
        from shared.errors import RecordMissing

        raise RecordMissing(f"knowledge base source {source_id} is discarded")
    return source


def source_settings(
    session: Session, organization_id: int, source: KnowledgeBaseSource
) -> dict[str, Any]:
    """The organization data source's settings overlaid with the source's own."""
    merged: dict[str, Any] = {}
    if source.organization_data_source_id is not None:
        ods = session.execute(
            select_scoped(OrganizationDataSource, organization_id=organization_id).where(
                OrganizationDataSource.id == source.organization_data_source_id
            )
        ).scalar_one_or_none()
        if ods is not None:
            merged.update(ods.settings or {})
    merged.update(source.settings or {})
    return merged


def documents_of_source(
    session: Session, organization_id: int, source_id: int
) -> dict[str, KnowledgeBaseDocument]:
    rows = session.execute(
        select_scoped(KnowledgeBaseDocument, organization_id=organization_id).where(
            KnowledgeBaseDocument.knowledge_base_source_id == source_id
        )
    ).scalars()
    return {row.source_identifier: row for row in rows}


def unfinished_crawl_task(
    session: Session, organization_id: int, source_id: int
) -> KnowledgeBaseCrawlTask | None:
    """The source's latest crawl task still pending or running, if any."""
    return session.execute(
        select_scoped(KnowledgeBaseCrawlTask, organization_id=organization_id)
        .where(
            KnowledgeBaseCrawlTask.knowledge_base_source_id == source_id,
            KnowledgeBaseCrawlTask.status.in_(UNFINISHED_CRAWL_STATES),
        )
        .order_by(KnowledgeBaseCrawlTask.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def upsert_sections(
    session: Session,
    organization_id: int,
    source: KnowledgeBaseSource,
    sections: Sequence[ListedSection],
    now: datetime,
) -> dict[str, KnowledgeBaseSection]:
    """Create or update the listed sections (parents first), reclaiming discarded ones."""
    existing = {
        row.source_identifier: row
        for row in session.execute(
            select_scoped(KnowledgeBaseSection, organization_id=organization_id).where(
                KnowledgeBaseSection.knowledge_base_source_id == source.id
            )
        ).scalars()
    }
    for listed in sections:
        row = existing.get(listed.identifier)
        if row is None:
            row = KnowledgeBaseSection(
                organization_id=organization_id,
                knowledge_base_source_id=source.id,
                source_identifier=listed.identifier,
                created_at=now,
            )
            session.add(row)
            existing[listed.identifier] = row
        row.name, row.url, row.locale = listed.name, listed.url, listed.locale
        row.position = listed.position
        row.discarded_at = None
        row.updated_at = now
    session.flush()
    for listed in sections:
        parent = existing.get(listed.parent_identifier) if listed.parent_identifier else None
        existing[listed.identifier].parent_id = parent.id if parent else None
    return existing


def document_with_identifier(
    session: Session, organization_id: int, source_id: int, identifier: str
) -> KnowledgeBaseDocument | None:
    """The source's document for ``identifier`` (discarded or not), if it has one."""
    return session.execute(
        select_scoped(KnowledgeBaseDocument, organization_id=organization_id).where(
            KnowledgeBaseDocument.knowledge_base_source_id == source_id,
            KnowledgeBaseDocument.source_identifier == identifier,
        )
    ).scalar_one_or_none()


def reclaim_or_add_document(
    session: Session,
    organization_id: int,
    source: KnowledgeBaseSource,
    identifier: str,
    row: KnowledgeBaseDocument | None,
    now: datetime,
) -> KnowledgeBaseDocument:
    """``row`` (the source's document for ``identifier``) made live again, or, when there is
    none, a new one added to the session."""
    if row is None:
        row = KnowledgeBaseDocument(
            organization_id=organization_id,
            knowledge_base_source_id=source.id,
            source_type=source.type,
            source_identifier=identifier,
            created_at=now,
        )
        session.add(row)
    row.discarded_at = None
    return row


def upsert_document(
    session: Session,
    organization_id: int,
    source: KnowledgeBaseSource,
    row: KnowledgeBaseDocument | None,
    listed: ListedDocument,
    now: datetime,
) -> KnowledgeBaseDocument:
    """Create or update one listed document; a discarded one is reclaimed. Content from the
    listing (when it carries any) is stored, and a change clears ``chunks_synced_at``."""
    row = reclaim_or_add_document(session, organization_id, source, listed.identifier, row, now)
    row.title, row.url, row.locale = listed.title, listed.url, listed.locale
    row.updated_at = now
    if listed.content is not None:
        store_content(row, listed.title, listed.content, now)
    return row


def store_content(
    row: KnowledgeBaseDocument, title: str | None, content: str, now: datetime
) -> bool:
    """Write content; returns whether it changed (a change clears ``chunks_synced_at``)."""
    digest = content_hash(title, content)
    changed = digest != row.content_hash
    row.title, row.content = title, content
    if changed:
        row.content_hash = digest
        row.chunks_synced_at = None
    row.last_synced_at = now
    row.updated_at = now
    return changed


def mark_chunks_synced(
    session: Session,
    organization_id: int,
    document_id: int,
    indexed_hash: str | None,
    now: datetime,
) -> None:
    """Set the document's ``chunks_synced_at``, unless its content changed since the chunks
    were made from content of ``indexed_hash`` (then the recovery sweep chunks it again)."""
    session.execute(
        update(KnowledgeBaseDocument)
        .where(
            organization_filter(KnowledgeBaseDocument, organization_id),
            KnowledgeBaseDocument.id == document_id,
            KnowledgeBaseDocument.content_hash.is_not_distinct_from(indexed_hash),
        )
        .values(chunks_synced_at=now)
    )


def link_sections(
    session: Session,
    organization_id: int,
    document: KnowledgeBaseDocument,
    section_ids: Iterable[int],
    now: datetime,
) -> None:
    wanted = set(section_ids)
    current = {
        link.knowledge_base_section_id: link
        for link in session.execute(
            select_scoped(KnowledgeBaseDocumentSection, organization_id=organization_id).where(
                KnowledgeBaseDocumentSection.knowledge_base_document_id == document.id
            )
        ).scalars()
    }
    for section_id in wanted - set(current):
        session.add(
            KnowledgeBaseDocumentSection(
                organization_id=organization_id,
                knowledge_base_document_id=document.id,
                knowledge_base_section_id=section_id,
                created_at=now,
                updated_at=now,
            )
        )
    for section_id in set(current) - wanted:
        session.delete(current[section_id])


def discard_sections_except(
    session: Session, organization_id: int, source_id: int, keep: set[str], now: datetime
) -> int:
    result = session.execute(
        update(KnowledgeBaseSection)
        .where(
            organization_filter(KnowledgeBaseSection, organization_id),
            KnowledgeBaseSection.knowledge_base_source_id == source_id,
            KnowledgeBaseSection.discarded_at.is_(None),
            KnowledgeBaseSection.source_identifier.not_in(keep) if keep else true(),
        )
        .values(discarded_at=now, updated_at=now)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def discard_sections_before(
    session: Session, organization_id: int, source_id: int, before: datetime, now: datetime
) -> int:
    """Discard the source's sections not written since ``before`` (a resumable pass's
    start: a section it listed was written at or after it)."""
    result = session.execute(
        update(KnowledgeBaseSection)
        .where(
            organization_filter(KnowledgeBaseSection, organization_id),
            KnowledgeBaseSection.knowledge_base_source_id == source_id,
            KnowledgeBaseSection.discarded_at.is_(None),
            KnowledgeBaseSection.updated_at < before,
        )
        .values(discarded_at=now, updated_at=now)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def mark_source_synced(source: KnowledgeBaseSource, now: datetime) -> None:
    source.sync_status = "synced"
    source.last_synced_at = now
    source.last_sync_error = None
    source.updated_at = now


def mark_source_failed(session: Session, organization_id: int, source_id: int, error: str) -> None:
    session.execute(
        update(KnowledgeBaseSource)
        .where(
            organization_filter(KnowledgeBaseSource, organization_id),
            KnowledgeBaseSource.id == source_id,
        )
        .values(sync_status="failed", last_sync_error=error[:2000], updated_at=func.now())
    )


#: The seed's recovery-sweep criteria (also what ``speedtier kb check`` counts).
RECOVERY_BACKLOG = (
    KnowledgeBaseDocument.discarded_at.is_(None),
    KnowledgeBaseDocument.chunks_synced_at.is_(None),
    KnowledgeBaseDocument.content.is_not(None),
    KnowledgeBaseDocument.content != "",
    KnowledgeBaseDocument.source_type.not_in(EXCLUDED_SOURCE_TYPES),
)


def recovery_backlog_size(session: Session) -> int:
    """How many documents the recovery sweep would pick up, across tenants."""
    count = session.scalar(
        select(func.count()).select_from(KnowledgeBaseDocument).where(*RECOVERY_BACKLOG)
    )
    return int(count or 0)


def sources_still_failing(
    session: Session, limit: int = 50
) -> Sequence[Row[int, int, str, str, datetime | None]]:
    """Live synced sources whose last sync failed or is over two days old, across tenants,
    the longest unsynced first: ``id, organization_id, type, sync_status, last_synced_at``."""
    return session.execute(
        select(
            KnowledgeBaseSource.id,
            KnowledgeBaseSource.organization_id,
            KnowledgeBaseSource.type,
            KnowledgeBaseSource.sync_status,
            KnowledgeBaseSource.last_synced_at,
        )
        .where(
            KnowledgeBaseSource.type.not_in(EXCLUDED_SOURCE_TYPES),
            KnowledgeBaseSource.discarded_at.is_(None),
            or_(
                KnowledgeBaseSource.sync_status == "failed",
                KnowledgeBaseSource.last_synced_at < func.now() - func.make_interval(0, 0, 0, 2),
            ),
        )
        .order_by(KnowledgeBaseSource.last_synced_at.asc().nulls_first())
        .limit(limit)
    ).all()
