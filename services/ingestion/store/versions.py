"""A document's kept versions: the current one and up to :data:`RETAINED_SNAPSHOTS`
superseded ones, each with the text it was indexed from."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, insert
from sqlalchemy.orm import Session, undefer

from services.ingestion.store.documents import get_document
from shared.db.models.ingestion import KbDocumentVersion
from shared.db.tenant import select_scoped
from shared.errors import RecordMissing

#: Superseded versions kept per document, besides the current one.
RETAINED_SNAPSHOTS = 10
#: A document's first version (``current_version`` is 0 before it).
FIRST_VERSION = 1
#: The versions' table, for a Core ``INSERT`` (no ORM bookkeeping).
_VERSIONS = cast(Table, KbDocumentVersion.__table__)


def add_version(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    version: int,
    content: str,
    content_hash: str,
    now: datetime,
    cause: str | None = None,
) -> None:
    """Write ``content`` as the document's ``version`` (made current by ``cause``) and
    delete the versions older than the retained superseded ones (the caller holds the
    document's lock).

    One ``INSERT`` statement, not an ORM object flushed by the unit of work (nothing reads
    the row back in this transaction); the ``DELETE`` is sent only when a version can be
    old enough to go (versions count from 1, so not before version ``RETAINED_SNAPSHOTS +
    2``): a document's first eleven versions cost one statement each, not two."""
    session.execute(
        insert(_VERSIONS).values(
            organization_id=organization_id,
            document_id=document_id,
            version=version,
            content=content,
            content_hash=content_hash,
            cause=cause,
            created_at=now,
        )
    )
    oldest_kept = version - RETAINED_SNAPSHOTS
    if oldest_kept <= FIRST_VERSION:
        return
    session.execute(
        delete(KbDocumentVersion).where(
            KbDocumentVersion.organization_id == organization_id,
            KbDocumentVersion.document_id == document_id,
            KbDocumentVersion.version < oldest_kept,
        ),
        execution_options={"synchronize_session": False},
    )


def list_versions(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    knowledge_base_id: int | None = None,
) -> list[KbDocumentVersion]:
    """The kept versions, newest first, without their content: the current one (the
    document's ``current_version``) and up to ten superseded ones. Raises RecordMissing."""
    get_document(
        session,
        organization_id=organization_id,
        document_id=document_id,
        knowledge_base_id=knowledge_base_id,
    )
    statement = select_scoped(KbDocumentVersion, organization_id=organization_id).where(
        KbDocumentVersion.document_id == document_id
    )
    return list(session.scalars(statement.order_by(KbDocumentVersion.version.desc())))


def get_version(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    version: int,
    knowledge_base_id: int | None = None,
) -> KbDocumentVersion:
    """One kept version with its content (for a diff or a rollback). Raises RecordMissing
    for a missing document or a version not kept."""
    get_document(
        session,
        organization_id=organization_id,
        document_id=document_id,
        knowledge_base_id=knowledge_base_id,
    )
    statement = (
        select_scoped(KbDocumentVersion, organization_id=organization_id)
        .where(KbDocumentVersion.document_id == document_id, KbDocumentVersion.version == version)
        .options(undefer(KbDocumentVersion.content))
    )
    found = session.execute(statement).scalar_one_or_none()
    if found is None:
        raise RecordMissing(f"version {version} of document {document_id} is not kept")
    return found
