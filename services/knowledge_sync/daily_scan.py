"""The daily scan's listings (the ``kb-sync`` tick): every live source, and the documents the
recovery sweep picks up, across tenants; the units they become are tenant-scoped."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.knowledge_sync.store import EXCLUDED_SOURCE_TYPES, RECOVERY_BACKLOG
from shared.db.models.rails import KnowledgeBaseDocument, KnowledgeBaseSource


def sources_to_scan(
    session: Session, batch: int = 1000
) -> Iterable[tuple[int, int, str, int | None]]:
    """``(organization_id, source_id, type, organization_data_source_id)`` of every live source
    but the excluded types, across tenants (the daily tick only; the units are tenant-scoped)."""
    statement = (
        select(
            KnowledgeBaseSource.organization_id,
            KnowledgeBaseSource.id,
            KnowledgeBaseSource.type,
            KnowledgeBaseSource.organization_data_source_id,
        )
        .where(
            KnowledgeBaseSource.discarded_at.is_(None),
            KnowledgeBaseSource.type.not_in(EXCLUDED_SOURCE_TYPES),
        )
        .order_by(KnowledgeBaseSource.id)
        .execution_options(yield_per=batch)
    )
    for org, source_id, source_type, ods in session.execute(statement):
        yield int(org), int(source_id), str(source_type), ods


def documents_needing_chunks(session: Session, batch: int = 1000) -> Iterable[tuple[int, int, str]]:
    """The recovery sweep: kept documents with content but no chunks, across tenants."""
    statement = (
        select(
            KnowledgeBaseDocument.organization_id,
            KnowledgeBaseDocument.id,
            KnowledgeBaseDocument.source_type,
        )
        .where(*RECOVERY_BACKLOG)
        .order_by(KnowledgeBaseDocument.id)
        .execution_options(yield_per=batch)
    )
    for org, document_id, source_type in session.execute(statement):
        yield int(org), int(document_id), str(source_type)
