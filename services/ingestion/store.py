"""Ingestion's SQL: knowledge bases, documents, versions, API keys and usage events.

Every function takes a session and (but for :func:`organization_for_key` and the ticks'
cross-tenant sweeps) an ``organization_id`` that every statement filters on. A missing,
deleted or other organization's record raises :class:`~shared.errors.RecordMissing`, the
same for all three (the API answers 404). Nothing here commits: the caller owns the unit of
work, and enqueues (``ingest-document-<id>``) only after its commit.

Locks: a document's writers (the pipeline's replacement, a re-upload, a retry, a delete)
take :func:`lock_document` (a transaction-scoped advisory lock) so they serialise without
holding row locks across slow work; adding a document by name takes a lock on that name,
so two uploads of one name cannot both create it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.orm import Session, undefer

from services.ingestion.fetching import refresh_interval_seconds
from services.web.urls import normalize_url
from shared.db.base import utcnow
from shared.db.models.ingestion import (
    MAX_SOURCE_BYTES,
    REFRESH_SCHEDULES,
    IngestionApiKey,
    KbChunk,
    KbDocument,
    KbDocumentVersion,
    KnowledgeBase,
    UsageEvent,
)
from shared.db.tenant import organization_filter, select_scoped
from shared.errors import RecordMissing, SpeedtierError

MAX_CRAWL_DEPTH = 5
MAX_NAME_LENGTH = 255
#: Superseded versions kept per document, besides the current one.
RETAINED_SNAPSHOTS = 10
API_KEY_PREFIX = "stk_"
INGESTED_EVENT = "kb_document_ingested"


class DocumentTooLarge(SpeedtierError):
    """The source is over the 10 MB content limit (the API answers 413)."""


class DocumentBusy(SpeedtierError):
    """The document is being ingested; the operation needs it ready or failed (409)."""


@dataclass(frozen=True)
class FileSource:
    """An uploaded file: its bytes, declared content type and file name."""

    data: bytes
    content_type: str | None = None
    filename: str | None = None


@dataclass(frozen=True)
class TextSource:
    """Text posted as JSON."""

    text: str


@dataclass(frozen=True)
class UrlSource:
    """A web page, fetched by the pipeline, following same-host links ``crawl_depth`` deep."""

    url: str
    crawl_depth: int = 0


DocumentSource = FileSource | TextSource | UrlSource


@dataclass(frozen=True)
class AddedDocument:
    """The document now in ``processing``; ``replaced`` when a live one of that name
    existed (same id, its versions kept)."""

    document: KbDocument
    replaced: bool


def _lock_key(*parts: object) -> int:
    name = ":".join(str(part) for part in parts)
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"kb-ingestion").digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_document(session: Session, organization_id: int, document_id: int) -> None:
    """Hold the document's advisory lock until the transaction ends."""
    key = _lock_key("document", organization_id, document_id)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


# -- knowledge bases -----------------------------------------------------------------------


def _check_schedule(refresh_schedule: str | None) -> None:
    if refresh_schedule is not None and refresh_schedule not in REFRESH_SCHEDULES:
        raise ValueError(f"refresh_schedule must be one of {', '.join(REFRESH_SCHEDULES)}")


def create_knowledge_base(
    session: Session,
    *,
    organization_id: int,
    name: str,
    refresh_schedule: str | None = None,
    now: datetime | None = None,
) -> KnowledgeBase:
    """A new knowledge base (flushed, so it has its id).

    Raises:
      ValueError: a blank or over-long name, or an unknown ``refresh_schedule``.
    """
    _check_schedule(refresh_schedule)
    now = now or utcnow()
    base = KnowledgeBase(
        organization_id=organization_id,
        name=_checked_name(name),
        refresh_schedule=refresh_schedule,
        created_at=now,
        updated_at=now,
    )
    session.add(base)
    session.flush()
    return base


def get_knowledge_base(
    session: Session, *, organization_id: int, knowledge_base_id: int, for_share: bool = False
) -> KnowledgeBase:
    """The live knowledge base. Raises RecordMissing (missing, deleted or another tenant's)."""
    statement = select_scoped(KnowledgeBase, organization_id=organization_id).where(
        KnowledgeBase.id == knowledge_base_id, KnowledgeBase.deleted_at.is_(None)
    )
    if for_share:
        statement = statement.with_for_update(read=True)
    base = session.execute(statement).scalar_one_or_none()
    if base is None:
        raise RecordMissing(f"knowledge base {knowledge_base_id} not found")
    return base


def list_knowledge_bases(
    session: Session, *, organization_id: int, limit: int = 100, after_id: int | None = None
) -> list[KnowledgeBase]:
    """Live knowledge bases by id, ``limit`` at a time after ``after_id`` (keyset pages)."""
    statement = select_scoped(KnowledgeBase, organization_id=organization_id).where(
        KnowledgeBase.deleted_at.is_(None)
    )
    if after_id is not None:
        statement = statement.where(KnowledgeBase.id > after_id)
    return list(session.scalars(statement.order_by(KnowledgeBase.id).limit(limit)))


def set_refresh_schedule(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    refresh_schedule: str | None,
    recrawl_interval_seconds: float,
    now: datetime | None = None,
) -> KnowledgeBase:
    """Change the base's refresh schedule; its URL documents' next refresh moves up when the
    new cadence is sooner than what they were waiting for (never later: a pending backoff
    is not cut short by choosing a slower schedule)."""
    _check_schedule(refresh_schedule)
    now = now or utcnow()
    base = get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    base.refresh_schedule = refresh_schedule
    base.updated_at = now
    interval = refresh_interval_seconds(refresh_schedule, recrawl_interval_seconds)
    sooner = func.coalesce(KbDocument.last_fetched_at, now) + timedelta(seconds=interval)
    session.execute(
        update(KbDocument)
        .where(
            KbDocument.organization_id == organization_id,
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.kind == "url",
            KbDocument.deleted_at.is_(None),
            KbDocument.refresh_failures == 0,
            or_(KbDocument.next_refresh_at.is_(None), KbDocument.next_refresh_at > sooner),
        )
        .values(next_refresh_at=sooner),
        execution_options={"synchronize_session": False},
    )
    return base


def delete_knowledge_base(
    session: Session, *, organization_id: int, knowledge_base_id: int, now: datetime | None = None
) -> None:
    """Soft-delete the base and its documents, and delete their chunks.

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


# -- documents -----------------------------------------------------------------------------


def _checked_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_NAME_LENGTH:
        raise ValueError(f"name must be 1 to {MAX_NAME_LENGTH} characters")
    return cleaned


def _checked_audience(audience: Sequence[str]) -> list[str]:
    if isinstance(audience, str) or not all(isinstance(a, str) and a for a in audience):
        raise ValueError("audience must be a list of non-empty strings")
    return sorted(set(audience))


def _source_columns(source: DocumentSource) -> dict[str, Any]:
    """The columns a source sets (every source column, so a replacement clears the rest)."""
    columns: dict[str, Any] = {
        "content_type": None,
        "filename": None,
        "url": None,
        "crawl_depth": 0,
        "source_bytes": None,
    }
    if isinstance(source, FileSource):
        data = source.data
        columns.update(kind="file", content_type=source.content_type, filename=source.filename)
    elif isinstance(source, TextSource):
        data = source.text.encode()
        columns.update(kind="text", content_type="text/plain; charset=utf-8")
    else:
        url = normalize_url(source.url)
        if url is None:
            raise ValueError("url must be an absolute http(s) URL")
        if not 0 <= source.crawl_depth <= MAX_CRAWL_DEPTH:
            raise ValueError(f"crawl_depth must be between 0 and {MAX_CRAWL_DEPTH}")
        # Fetched by the pipeline; a resubmitted URL is fetched again.
        columns.update(kind="url", url=url, crawl_depth=source.crawl_depth)
        return columns
    if len(data) > MAX_SOURCE_BYTES:
        raise DocumentTooLarge("content over 10 MB")
    columns["source_bytes"] = data
    return columns


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

    Raises:
      RecordMissing: the base is missing, deleted or another tenant's.
      DocumentTooLarge: the bytes (or text) are over 10 MB.
      ValueError: a blank name, a bad URL or crawl depth, a malformed audience.
    """
    now = now or utcnow()
    name = _checked_name(name)
    columns = _source_columns(source)
    columns.update(
        audience=_checked_audience(audience),
        connector=connector,
        status="processing",
        failure_reason=None,
        failed_at=None,
        attempts=0,
        submitted_at=now,
        updated_at=now,
    )
    get_knowledge_base(
        session,
        organization_id=organization_id,
        knowledge_base_id=knowledge_base_id,
        for_share=True,
    )
    key = _lock_key("name", organization_id, knowledge_base_id, name)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    existing = session.execute(
        select_scoped(KbDocument, organization_id=organization_id)
        .where(
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.name == name,
            KbDocument.deleted_at.is_(None),
        )
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if existing is None:
        document = KbDocument(
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            name=name,
            created_at=now,
            **columns,
        )
        session.add(document)
        session.flush()
        return AddedDocument(document, replaced=False)
    lock_document(session, organization_id, existing.id)
    session.refresh(existing)
    if not (existing.kind == "url" and existing.url == columns["url"]):
        # Another page (or none): the freshness clock starts over. The same page keeps it.
        columns.update(last_fetched_at=None, next_refresh_at=None, refresh_failures=0)
    for column, value in columns.items():
        setattr(existing, column, value)
    # The current chunk set stays searchable until the new one replaces it, seen by the new
    # audience from now on: narrowing who may see a document takes effect at once.
    session.execute(
        update(KbChunk)
        .where(
            KbChunk.organization_id == organization_id,
            KbChunk.document_id == existing.id,
            KbChunk.audience != columns["audience"],
        )
        .values(audience=columns["audience"]),
        execution_options={"synchronize_session": False},
    )
    session.flush()
    return AddedDocument(existing, replaced=True)


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


#: Bytes per round trip when reading a document's source (see :func:`read_source`).
SOURCE_READ_SLICE = 1 << 20


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

    def piece(offset: int) -> Any:
        return func.substring(KbDocument.source_bytes, offset + 1, SOURCE_READ_SLICE)

    first = session.execute(
        select(func.octet_length(KbDocument.source_bytes), piece(0)).where(*scoped)
    ).one_or_none()
    if first is None or first[0] is None:
        return None
    size, head = first
    if size <= SOURCE_READ_SLICE:
        return bytes(head)  # one round trip, as for most documents
    source = bytearray(head)
    for offset in range(SOURCE_READ_SLICE, size, SOURCE_READ_SLICE):
        source += session.execute(select(piece(offset)).where(*scoped)).scalar_one()
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
    if after_id is not None:
        statement = statement.where(KbDocument.id > after_id)
    return list(session.scalars(statement.order_by(KbDocument.id).limit(limit)))


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
    session.execute(
        delete(KbChunk).where(
            KbChunk.organization_id == organization_id, KbChunk.document_id.in_(document_ids)
        ),
        execution_options={"synchronize_session": False},
    )


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
    The caller commits, then enqueues. Raises RecordMissing."""
    get_document(
        session,
        organization_id=organization_id,
        document_id=document_id,
        knowledge_base_id=knowledge_base_id,
    )
    lock_document(session, organization_id, document_id)
    document = get_document(session, organization_id=organization_id, document_id=document_id)
    if document.status != "processing":
        resubmit(document, now or utcnow())
        session.flush()
    return document


def resubmit(document: KbDocument, now: datetime) -> None:
    """Put a locked document back in ``processing`` as a new submission (its attempts
    start over; a pass still running for the previous one will write nothing)."""
    document.status = "processing"
    document.failure_reason = None
    document.failed_at = None
    document.attempts = 0
    document.submitted_at = now
    document.updated_at = now


def list_chunks(session: Session, *, organization_id: int, document_id: int) -> list[KbChunk]:
    """The document's chunks in order (empty for another tenant's document)."""
    statement = select_scoped(KbChunk, organization_id=organization_id).where(
        KbChunk.document_id == document_id
    )
    return list(session.scalars(statement.order_by(KbChunk.position)))


# -- versions ------------------------------------------------------------------------------


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


# -- API keys and usage --------------------------------------------------------------------


def hash_api_key(plain_key: str) -> str:
    """SHA-256 (hex) of a key: keys are random, so a fast hash is enough to store them."""
    return hashlib.sha256(plain_key.encode()).hexdigest()


def create_api_key(
    session: Session, *, organization_id: int, name: str, now: datetime | None = None
) -> tuple[IngestionApiKey, str]:
    """A new key for the organization: the row (hash only) and the plain key, which is
    returned this once and stored nowhere."""
    plain = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = IngestionApiKey(
        organization_id=organization_id,
        name=_checked_name(name),
        key_hash=hash_api_key(plain),
        created_at=now or utcnow(),
    )
    session.add(key)
    session.flush()
    return key, plain


def revoke_api_key(
    session: Session, *, organization_id: int, key_id: int, now: datetime | None = None
) -> None:
    """Revoke a key of the organization (idempotent). Raises RecordMissing."""
    key = session.execute(
        select_scoped(IngestionApiKey, organization_id=organization_id).where(
            IngestionApiKey.id == key_id
        )
    ).scalar_one_or_none()
    if key is None:
        raise RecordMissing(f"API key {key_id} not found")
    if key.revoked_at is None:
        key.revoked_at = now or utcnow()


def organization_for_key(session: Session, plain_key: str) -> int | None:
    """The organization a live (unrevoked) key belongs to, else None."""
    if not plain_key:
        return None
    return session.scalar(
        select(IngestionApiKey.organization_id).where(
            IngestionApiKey.key_hash == hash_api_key(plain_key),
            IngestionApiKey.revoked_at.is_(None),
        )
    )


def record_usage_event(
    session: Session,
    *,
    organization_id: int,
    kind: str,
    subject_id: int | None,
    payload: dict[str, Any],
    now: datetime | None = None,
) -> None:
    """Record something analytics counts, in the caller's transaction."""
    session.add(
        UsageEvent(
            organization_id=organization_id,
            kind=kind,
            subject_id=subject_id,
            payload=payload,
            created_at=now or utcnow(),
        )
    )
