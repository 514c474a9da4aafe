"""A document's chunks as ingestion sees them: read, counted, re-audienced, deleted.

Writing a new chunk set is the indexing kernel's (:mod:`services.indexing.kb_chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session

from shared.db.models.ingestion import KbChunk
from shared.db.tenant import select_scoped


def list_chunks(session: Session, *, organization_id: int, document_id: int) -> list[KbChunk]:
    """The document's chunks in order (empty for another tenant's document)."""
    statement = select_scoped(KbChunk, organization_id=organization_id).where(
        KbChunk.document_id == document_id
    )
    return list(session.scalars(statement.order_by(KbChunk.position)))


def chunk_count(session: Session, organization_id: int, document_id: int) -> int:
    """How many chunks the document has."""
    return int(
        session.scalar(
            select(func.count()).where(
                KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
            )
        )
        or 0
    )


def has_chunks(session: Session, organization_id: int, document_id: int) -> bool:
    """Whether the document has a chunk set."""
    return bool(
        session.scalar(
            select(
                exists().where(
                    KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
                )
            )
        )
    )


def set_chunk_audience(
    session: Session, organization_id: int, document_id: int, audience: list[str]
) -> None:
    """Show the document's current chunks to ``audience`` from now on (narrowing who may
    see a document takes effect at once, before any new chunk set replaces them)."""
    session.execute(
        update(KbChunk)
        .where(
            KbChunk.organization_id == organization_id,
            KbChunk.document_id == document_id,
            KbChunk.audience != audience,
        )
        .values(audience=audience),
        execution_options={"synchronize_session": False},
    )


def delete_chunks(session: Session, organization_id: int, document_ids: Sequence[int]) -> None:
    """Take the documents' chunks out of search."""
    session.execute(
        delete(KbChunk).where(
            KbChunk.organization_id == organization_id, KbChunk.document_id.in_(document_ids)
        ),
        execution_options={"synchronize_session": False},
    )
