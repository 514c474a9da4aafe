"""Knowledge-base ingestion (seed 003): bases, documents, versions, chunks, usage events and
per-organization API keys, all in schema ``api2``.

Tenant safety is also structural: a document refers to its base, and a chunk or version to
its document, through ``(organization_id, id)`` foreign keys, so no row can point at
another organization's parent. Timestamps are ``timestamptz`` (this project owns these
tables; the Rails convention of naive UTC does not apply).

Invariant kept by :mod:`services.ingestion.pipeline`: a document's chunks are always one
complete chunk set, that of version ``current_version`` (none while it is 0), replaced in one
transaction. ``kb_document_versions`` holds the current content and the ten most recent
superseded ones, each written once, when it became current.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Computed,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Api2Base, utcnow
from shared.db.vector import DEFAULT_DIMENSIONS, Embedding

#: The dimension of ``kb_chunks.embedding`` where it is ``vector``; see the migration.
EMBEDDING_DIMENSIONS = DEFAULT_DIMENSIONS

#: The content limit: source bytes (an upload, a text, a fetched page) and extracted text.
MAX_SOURCE_BYTES = 10 * 1024 * 1024

DOCUMENT_KINDS = ("file", "text", "url")
DOCUMENT_STATUSES = ("processing", "ready", "failed")
REFRESH_SCHEDULES = ("hourly", "daily", "weekly")
#: What put a document's content in place, recorded on each version (``cause``): an API
#: upload (file, text or URL), the recrawl or a base's scheduled refresh re-fetching it, a
#: connector sync, a feed read, a rollback to a kept version.
VERSION_CAUSES = ("upload", "recrawl", "refresh", "connector", "feed", "rollback")

#: ``content_tsv``'s expression, spelled the way PostgreSQL stores it (autogenerate compares).
CHUNK_TSVECTOR_SQL = "to_tsvector('simple'::regconfig, content)"

_EMPTY_TEXT_ARRAY = text("'{}'::text[]")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _created_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), default=utcnow)


def _updated_at() -> Mapped[datetime]:
    return mapped_column(
        DateTime(timezone=True), server_default=func.now(), default=utcnow, onupdate=utcnow
    )


class IngestionApiKey(Api2Base):
    """A per-organization API key, stored as the SHA-256 (hex) of the key; the plain key is
    shown once, when created."""

    __tablename__ = "ingestion_api_keys"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger, index=True)
    name: Mapped[str] = mapped_column(Text)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _created_at()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class KnowledgeBase(Api2Base):
    """A knowledge base: a named set of documents; ``refresh_schedule`` opts its URL
    documents into recurring re-fetch."""

    __tablename__ = "knowledge_bases"
    __table_args__ = (
        UniqueConstraint("organization_id", "id"),
        CheckConstraint(_in("refresh_schedule", REFRESH_SCHEDULES), name="refresh_schedule"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(Text)
    refresh_schedule: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class KbDocument(Api2Base):
    """One document of a knowledge base and its ingestion state.

    ``source_bytes`` holds what is ingested (the upload, the text as UTF-8, or the fetched
    page as markdown), so a retry re-runs against the same bytes; it is deferred, so
    listing documents never loads it. A live name is unique per base: re-adding it
    replaces the document in place (same id).
    """

    __tablename__ = "kb_documents"
    __table_args__ = (
        UniqueConstraint("organization_id", "id"),
        ForeignKeyConstraint(
            ["organization_id", "knowledge_base_id"],
            ["knowledge_bases.organization_id", "knowledge_bases.id"],
        ),
        Index(
            "uq_kb_documents_live_name",
            "knowledge_base_id",
            "name",
            unique=True,
            postgresql_where=text("deleted_at IS NULL"),
        ),
        Index(
            "ix_kb_documents_processing",
            "submitted_at",
            "id",
            postgresql_where=text("status = 'processing' AND deleted_at IS NULL"),
        ),
        Index(
            "ix_kb_documents_refresh",
            "next_refresh_at",
            postgresql_where=text("kind = 'url' AND status = 'ready' AND deleted_at IS NULL"),
        ),
        CheckConstraint(_in("kind", DOCUMENT_KINDS), name="kind"),
        CheckConstraint(_in("status", DOCUMENT_STATUSES), name="status"),
        CheckConstraint("crawl_depth BETWEEN 0 AND 5", name="crawl_depth"),
        CheckConstraint(_in("submission_cause", VERSION_CAUSES), name="submission_cause"),
        CheckConstraint(
            f"octet_length(source_bytes) <= {MAX_SOURCE_BYTES}", name="source_bytes_size"
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    knowledge_base_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(
        Text, server_default=text("'processing'"), default="processing"
    )
    failure_reason: Mapped[str | None] = mapped_column(Text)
    content_type: Mapped[str | None] = mapped_column(Text)
    filename: Mapped[str | None] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(Text)
    crawl_depth: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    connector: Mapped[str | None] = mapped_column(Text)
    audience: Mapped[list[str]] = mapped_column(
        ARRAY(Text), server_default=_EMPTY_TEXT_ARRAY, default=list
    )
    source_bytes: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    index_fingerprint: Mapped[str | None] = mapped_column(Text)
    current_version: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    submitted_at: Mapped[datetime] = _created_at()
    #: What the current submission came from; the version it becomes records it.
    submission_cause: Mapped[str] = mapped_column(
        Text, server_default=text("'upload'"), default="upload"
    )
    ready_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fetched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_refresh_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    refresh_failures: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class KbDocumentVersion(Api2Base):
    """A document's extracted content as it was when it became current (immutable), and
    which path put it there."""

    __tablename__ = "kb_document_versions"
    __table_args__ = (
        UniqueConstraint("document_id", "version"),
        CheckConstraint(f"cause IS NULL OR {_in('cause', VERSION_CAUSES)}", name="cause"),
        ForeignKeyConstraint(
            ["organization_id", "document_id"],
            ["kb_documents.organization_id", "kb_documents.id"],
            ondelete="CASCADE",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    document_id: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text, deferred=True)
    content_hash: Mapped[str] = mapped_column(String(64))
    #: The path that made this content current (``VERSION_CAUSES``); None for versions
    #: written before causes were recorded.
    cause: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()


class KbChunk(Api2Base):
    """One chunk of a document: text, embedding, audience (empty = everyone) and the
    generated full-text vector (``simple`` configuration: language-neutral, no stemming)."""

    __tablename__ = "kb_chunks"
    __table_args__ = (
        UniqueConstraint("document_id", "position"),
        ForeignKeyConstraint(
            ["organization_id", "document_id"],
            ["kb_documents.organization_id", "kb_documents.id"],
            ondelete="CASCADE",
        ),
        Index(
            "ix_kb_chunks_organization_id_knowledge_base_id", "organization_id", "knowledge_base_id"
        ),
        Index("ix_kb_chunks_content_tsv", "content_tsv", postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    knowledge_base_id: Mapped[int] = mapped_column(BigInteger)
    document_id: Mapped[int] = mapped_column(BigInteger)
    position: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[list[float]] = mapped_column(Embedding(EMBEDDING_DIMENSIONS))
    audience: Mapped[list[str]] = mapped_column(
        ARRAY(Text), server_default=_EMPTY_TEXT_ARRAY, default=list
    )
    content_tsv: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(CHUNK_TSVECTOR_SQL, persisted=True), deferred=True
    )
    created_at: Mapped[datetime] = _created_at()


class UsageEvent(Api2Base):
    """Something a workspace did that analytics counts (``kb_document_ingested``...)."""

    __tablename__ = "usage_events"
    __table_args__ = (
        Index("ix_usage_events_organization_id_created_at", "organization_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(Text)
    subject_id: Mapped[int | None] = mapped_column(BigInteger)
    payload: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    created_at: Mapped[datetime] = _created_at()
