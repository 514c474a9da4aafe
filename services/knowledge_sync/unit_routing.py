"""What the enqueue route looks up before routing a unit: a source's type and a document's
provider, with their organization data source, matched on (organization, id) so another
tenant's id finds nothing and its job completes as record-missing."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from shared.db.models.rails import KnowledgeBaseDocument, KnowledgeBaseSource


def source_routing(
    session: Session, pairs: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], tuple[str, int | None]]:
    """``(organization_id, source_id) -> (type, organization_data_source_id)`` for live
    sources; each pair is matched on both ids, so another tenant's id finds nothing."""
    if not pairs:
        return {}
    rows = session.execute(
        select(
            KnowledgeBaseSource.organization_id,
            KnowledgeBaseSource.id,
            KnowledgeBaseSource.type,
            KnowledgeBaseSource.organization_data_source_id,
        ).where(tuple_(KnowledgeBaseSource.organization_id, KnowledgeBaseSource.id).in_(pairs))
    )
    return {(int(org), int(sid)): (str(kind), ods) for org, sid, kind, ods in rows}


def document_routing(
    session: Session, pairs: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], tuple[str, int | None]]:
    """``(organization_id, document_id) -> (provider, organization_data_source_id)``."""
    if not pairs:
        return {}
    rows = session.execute(
        select(
            KnowledgeBaseDocument.organization_id,
            KnowledgeBaseDocument.id,
            KnowledgeBaseDocument.source_type,
            KnowledgeBaseSource.organization_data_source_id,
        )
        .outerjoin(
            KnowledgeBaseSource,
            (KnowledgeBaseSource.id == KnowledgeBaseDocument.knowledge_base_source_id)
            & (KnowledgeBaseSource.organization_id == KnowledgeBaseDocument.organization_id),
        )
        .where(tuple_(KnowledgeBaseDocument.organization_id, KnowledgeBaseDocument.id).in_(pairs))
    )
    return {(int(org), int(did)): (str(kind), ods) for org, did, kind, ods in rows}
