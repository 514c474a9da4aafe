"""Documents: add (or replace by name), read, page through, and put back in ``processing``.

Deleting one is :mod:`.deletions`; its chunks are :mod:`.chunks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.ingestion.store.chunks import set_chunk_audience
from services.ingestion.store.document_sources import DocumentSource, source_columns
from services.ingestion.store.knowledge_bases import get_knowledge_base
from services.ingestion.store.locks import lock_document, lock_document_name
from services.ingestion.store.names import checked_name
from services.ingestion.store.paging import keyset_page
from shared.db.base import utcnow
from shared.db.models.ingestion import KbDocument
from shared.db.tenant import organization_filter, select_scoped
from shared.errors import RecordMissing, SpeedtierError

#: Bytes per round trip when reading a document's source (see :func:`read_source`).
SOURCE_READ_SLICE = 1 << 20


class DocumentBusy(SpeedtierError):
    """The document is being ingested; the operation needs it ready or failed (409)."""


@dataclass(frozen=True)
class AddedDocument:
    """The document now in ``processing``; ``replaced`` when a live one of that name
    existed (same id, its versions kept)."""

    document: KbDocument
    replaced: bool


def _checked_audience(audience: Sequence[str]) -> list[str]:
    if isinstance(audience, str) or not all(isinstance(a, str) and a for a in audience):
        raise ValueError("audience must be a list of non-empty strings")
    return sorted(set(audience))


def add_document(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    name: str,
    source: DocumentSource,
    audience: Sequence[str] = (),
    connector: str | None = None,
    now: datetime | None = None,
    cause: str = "upload",
) -> AddedDocument:
    """Add a document in ``processing``, or replace the live document of that name in the
    base in place (same id; status back to ``processing``; its content hash and version
    history kept, so an identical re-upload embeds nothing and a changed one is versioned;
    its current chunks stay searchable, under the new audience, until the new content
    replaces them).
    The caller commits, then enqueues ``ingest-document-<id>``; the sweep tick finds it
    anyway.

    Parameters:
      source: :class:`FileSource`, :class:`TextSource` or :class:`UrlSource`.
      audience: who may retrieve it (empty: everyone in the organization).
      connector: the connector binding the document came through, if any.
      cause: what the submission comes from (``upload``, ``feed``...), recorded on the
        version it becomes.

    Raises:
      RecordMissing: the base is missing, deleted or another tenant's.
      DocumentTooLarge: the bytes (or text) are over 10 MB.
      ValueError: a blank name, a bad URL or crawl depth, a malformed audience.
    """
    now = now or utcnow()
    name = checked_name(name)
    columns = source_columns(source)
    columns.update(
        audience=_checked_audience(audience),
        connector=connector,
        status="processing",
        failure_reason=None,
        failed_at=None,
        attempts=0,
        submitted_at=now,
        submission_cause=cause,
        updated_at=now,
    )
    scope = {"organization_id": organization_id, "knowledge_base_id": knowledge_base_id}
    get_knowledge_base(session, for_share=True, **scope)
    lock_document_name(session, organization_id, knowledge_base_id, name)
    existing = _live_document_named(session, name=name, **scope)
    if existing is None:
        document = KbDocument(name=name, created_at=now, **scope, **columns)
        session.add(document)
        session.flush()
        return AddedDocument(document, replaced=False)
    _replace_in_place(session, existing, columns)
    return AddedDocument(existing, replaced=True)


def _live_document_named(
    session: Session, *, organization_id: int, knowledge_base_id: int, name: str
) -> KbDocument | None:
    return session.execute(
        select_scoped(KbDocument, organization_id=organization_id)
        .where(
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.name == name,
            KbDocument.deleted_at.is_(None),
        )
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def _replace_in_place(session: Session, existing: KbDocument, columns: dict[str, Any]) -> None:
    """Give the live document of that name the new submission's columns, under its lock."""
    lock_document(session, existing.organization_id, existing.id)
    session.refresh(existing)
    if not (existing.kind == "url" and existing.url == columns["url"]):
        # Another page (or none): the freshness clock starts over. The same page keeps it.
        columns.update(last_fetched_at=None, next_refresh_at=None, refresh_failures=0)
    for column, value in columns.items():
        setattr(existing, column, value)
    # The current chunk set stays searchable until the new one replaces it, seen by the new
    # audience from now on: narrowing who may see a document takes effect at once.
    set_chunk_audience(session, existing.organization_id, existing.id, columns["audience"])
    session.flush()


def get_document(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    knowledge_base_id: int | None = None,
) -> KbDocument:
    """The live document (in ``knowledge_base_id`` when given); ``source_bytes`` is loaded
    only when read (:func:`read_source` reads it without keeping it on the instance).
    Raises RecordMissing (missing, deleted, another base's or tenant's)."""
    statement = select_scoped(KbDocument, organization_id=organization_id).where(
        KbDocument.id == document_id, KbDocument.deleted_at.is_(None)
    )
    if knowledge_base_id is not None:
        statement = statement.where(KbDocument.knowledge_base_id == knowledge_base_id)
    statement = statement.execution_options(populate_existing=True)
    document = session.execute(statement).scalar_one_or_none()
    if document is None:
        raise RecordMissing(f"document {document_id} not found")
    return document


def locked_document(session: Session, *, organization_id: int, document_id: int) -> KbDocument:
    """Take the document's lock (held until the transaction ends), then read the document
    as it is now. Raises RecordMissing (missing, deleted or another tenant's)."""
    lock_document(session, organization_id, document_id)
    return get_document(session, organization_id=organization_id, document_id=document_id)


def read_source(session: Session, *, organization_id: int, document_id: int) -> bytes | None:
    """The document's stored source bytes, returned to the caller and not kept on the ORM
    instance (so they are freed as soon as the caller lets go of them).

    Read :data:`SOURCE_READ_SLICE` bytes at a time: bytea arrives hex-encoded, so reading
    10 MB whole holds 20 MB of hex plus the bytes (a 61 MB peak, measured) where slices
    hold one slice's hex plus the bytes (22 MB). The slices are separate statements, so a
    re-upload between two of them can mix two sources; the pipeline discards such a read,
    since it writes only when the document's ``submitted_at`` is unchanged under its lock.
    """
    scoped = (organization_filter(KbDocument, organization_id), KbDocument.id == document_id)
    first = session.execute(
        select(func.octet_length(KbDocument.source_bytes), _source_slice(0)).where(*scoped)
    ).one_or_none()
    if first is None or first[0] is None:
        return None
    return rest_of_source(session, organization_id, document_id, *first)


def _source_slice(offset: int) -> Any:
    return func.substring(KbDocument.source_bytes, offset + 1, SOURCE_READ_SLICE)


def rest_of_source(
    session: Session, organization_id: int, document_id: int, size: int, head: bytes
) -> bytes:
    """The document's source of ``size`` bytes whose first slice (:data:`SOURCE_READ_SLICE`
    bytes) is ``head``, with the other slices read."""
    if size <= SOURCE_READ_SLICE:
        return bytes(head)  # one round trip, as for most documents
    scoped = (organization_filter(KbDocument, organization_id), KbDocument.id == document_id)
    source = bytearray(head)
    for offset in range(SOURCE_READ_SLICE, size, SOURCE_READ_SLICE):
        source += session.execute(select(_source_slice(offset)).where(*scoped)).scalar_one()
    return bytes(source)


def list_documents(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    status: str | None = None,
    limit: int = 100,
    after_id: int | None = None,
) -> list[KbDocument]:
    """Live documents of a live base by id, ``limit`` after ``after_id``; optionally only
    those in ``status``. Raises RecordMissing for a missing base."""
    get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    statement = select_scoped(KbDocument, organization_id=organization_id).where(
        KbDocument.knowledge_base_id == knowledge_base_id, KbDocument.deleted_at.is_(None)
    )
    if status is not None:
        statement = statement.where(KbDocument.status == status)
    return keyset_page(session, statement, KbDocument.id, limit=limit, after_id=after_id)


def mark_for_retry(
    session: Session,
    *,
    organization_id: int,
    document_id: int,
    knowledge_base_id: int | None = None,
    now: datetime | None = None,
) -> KbDocument:
    """Put the document back in ``processing`` to re-run against its stored source bytes
    (a URL without stored bytes is fetched again); already processing, it is left as is.
    The submission keeps its cause: the bytes still came from where they came from. The
    caller commits, then enqueues. Raises RecordMissing."""
    get_document(
        session,
        organization_id=organization_id,
        document_id=document_id,
        knowledge_base_id=knowledge_base_id,
    )
    document = locked_document(session, organization_id=organization_id, document_id=document_id)
    if document.status != "processing":
        resubmit(document, now or utcnow())
        session.flush()
    return document


def resubmit(document: KbDocument, now: datetime, cause: str | None = None) -> None:
    """Put a locked document back in ``processing`` as a new submission (its attempts
    start over; a pass still running for the previous one will write nothing); ``cause``:
    what the new submission comes from (kept when None)."""
    if cause is not None:
        document.submission_cause = cause
    document.status = "processing"
    document.failure_reason = None
    document.failed_at = None
    document.attempts = 0
    document.submitted_at = now
    document.updated_at = now
