"""Deleting knowledge bases and documents: soft-deleted rows, chunks out of search at once.

An ingestion still running for a deleted document finds it deleted and writes nothing; a
deleted document's name is free again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from services.ingestion.store.chunks import delete_chunks
from services.ingestion.store.documents import get_document
from services.ingestion.store.knowledge_bases import get_knowledge_base
from services.ingestion.store.locks import lock_document
from shared.db.base import utcnow
from shared.db.models.ingestion import KbDocument
from shared.db.models.kb_connectors import KbConnectorBinding


def delete_knowledge_base(
    session: Session, *, organization_id: int, knowledge_base_id: int, now: datetime | None = None
) -> None:
    """Soft-delete the base and its documents, delete their chunks and unbind its
    connectors.

    Raises RecordMissing when the base is missing, deleted or another tenant's.
    """
    now = now or utcnow()
    base = get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    base.deleted_at = now
    document_ids = session.scalars(
        select(KbDocument.id)
        .where(
            KbDocument.organization_id == organization_id,
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.deleted_at.is_(None),
        )
        .order_by(KbDocument.id)
    ).all()
    for document_id in document_ids:  # in id order: two deleters cannot deadlock
        lock_document(session, organization_id, document_id)
    _discard_documents(session, organization_id, list(document_ids), now)
    # A deleted base syncs nothing more: its connector bindings (and their items) go.
    session.execute(
        delete(KbConnectorBinding).where(
            KbConnectorBinding.organization_id == organization_id,
            KbConnectorBinding.knowledge_base_id == knowledge_base_id,
        ),
        execution_options={"synchronize_session": False},
    )


def delete_document(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    knowledge_base_id: int | None = None,
    now: datetime | None = None,
) -> None:
    """Soft-delete the document (its name becomes free) and delete its chunks; an ingestion
    still running finds it deleted and writes nothing. Raises RecordMissing."""
    get_document(
        session,
        organization_id=organization_id,
        document_id=document_id,
        knowledge_base_id=knowledge_base_id,
    )
    lock_document(session, organization_id, document_id)
    _discard_documents(session, organization_id, [document_id], now or utcnow())


def _discard_documents(
    session: Session, organization_id: int, document_ids: list[int], now: datetime
) -> None:
    if not document_ids:
        return
    session.execute(
        update(KbDocument)
        .where(
            KbDocument.organization_id == organization_id,
            KbDocument.id.in_(document_ids),
            KbDocument.deleted_at.is_(None),
        )
        .values(deleted_at=now, updated_at=now, source_bytes=None),
        execution_options={"synchronize_session": "fetch"},
    )
    delete_chunks(session, organization_id, document_ids)
