"""Typed models of the Rails-owned tables this project reads and writes (schema ``public``).

Names and columns follow the Rails schema the seeds describe: bigint ids, ``t.timestamps``
(``timestamp without time zone`` holding UTC, no database default), ``discarded_at`` for
soft deletes, ``jsonb`` settings, and an ``index_<table>_on_organization_id`` index on every
tenant table. Only the columns this project uses are modelled; Rails may have more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB, TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import (
    RailsBase,
    RailsTenant,
    RailsTimestamps,
    SoftDeleted,
    UTCDateTime,
    jsonb_object_default,
)

_EMPTY_JSONB = text("'{}'::jsonb")

# The expression PostgreSQL stores for pg_search_documents.content_tsvector, spelled the way
# PostgreSQL prints it back so that migration checks compare equal.
PG_SEARCH_TSVECTOR_SQL = "to_tsvector('simple'::regconfig, COALESCE(content, ''::text))"


def _jsonb_object() -> Mapped[dict[str, Any]]:
    return mapped_column(JSONB, server_default=_EMPTY_JSONB, default=jsonb_object_default)


class Organization(RailsTimestamps, SoftDeleted, RailsBase):
    """A tenant. ``time_zone`` is the IANA name reports resolve "today" in."""

    __tablename__ = "organizations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(String)
    time_zone: Mapped[str] = mapped_column(String, server_default=text("'UTC'"), default="UTC")
    demo: Mapped[bool] = mapped_column(Boolean, server_default=text("false"), default=False)


class DataSource(RailsTimestamps, RailsBase):
    """A provider kind (``notion``, ``zendesk``, ``unit21``, ``xcally``...), global."""

    __tablename__ = "data_sources"
    __table_args__ = (Index("index_data_sources_on_key", "key", unique=True),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    key: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)


class OrganizationDataSource(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """An organization's connection to a data source; rate windows are scoped by its id."""

    __tablename__ = "organization_data_sources"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    data_source_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("data_sources.id"), index=True
    )
    name: Mapped[str | None] = mapped_column(String)
    settings: Mapped[dict[str, Any]] = _jsonb_object()
    last_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class KnowledgeBaseSource(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """A Knowledge Library source; ``type`` names the provider (``notion``, ``zendesk``...)."""

    __tablename__ = "knowledge_base_sources"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    organization_data_source_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("organization_data_sources.id"), index=True
    )
    type: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    settings: Mapped[dict[str, Any]] = _jsonb_object()
    sync_status: Mapped[str] = mapped_column(
        String, server_default=text("'pending'"), default="pending"
    )
    last_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_sync_error: Mapped[str | None] = mapped_column(Text)


class KnowledgeBaseDocument(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """One document of a source (or standalone); ``chunks_synced_at`` NULL means re-chunk."""

    __tablename__ = "knowledge_base_documents"
    __table_args__ = (
        Index(
            "index_knowledge_base_documents_on_source_and_identifier",
            "knowledge_base_source_id",
            "source_identifier",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    knowledge_base_source_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_sources.id")
    )
    source_type: Mapped[str] = mapped_column(String)
    source_identifier: Mapped[str] = mapped_column(String)
    title: Mapped[str | None] = mapped_column(String)
    url: Mapped[str | None] = mapped_column(String)
    content: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(String)
    locale: Mapped[str | None] = mapped_column(String)
    last_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    chunks_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=_EMPTY_JSONB, default=jsonb_object_default
    )


class KnowledgeBaseSection(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """A provider section or category (Zendesk), nested through ``parent_id``."""

    __tablename__ = "knowledge_base_sections"
    __table_args__ = (
        Index(
            "index_knowledge_base_sections_on_source_and_identifier",
            "knowledge_base_source_id",
            "source_identifier",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    knowledge_base_source_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_sources.id")
    )
    parent_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_sections.id"), index=True
    )
    source_identifier: Mapped[str] = mapped_column(String)
    name: Mapped[str | None] = mapped_column(String)
    url: Mapped[str | None] = mapped_column(String)
    locale: Mapped[str | None] = mapped_column(String)
    position: Mapped[int | None] = mapped_column(Integer)


class KnowledgeBaseDocumentSection(RailsTenant, RailsTimestamps, RailsBase):
    """Join row placing a document in a section."""

    __tablename__ = "knowledge_base_document_sections"
    __table_args__ = (
        Index(
            "index_kb_document_sections_on_document_and_section",
            "knowledge_base_document_id",
            "knowledge_base_section_id",
            unique=True,
        ),
        Index("index_kb_document_sections_on_section_id", "knowledge_base_section_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    knowledge_base_document_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_documents.id")
    )
    knowledge_base_section_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_sections.id")
    )


class KnowledgeBaseCrawlTask(RailsTenant, RailsTimestamps, RailsBase):
    """A URL crawl; ``urls_pending`` counts claimed, unfinished URLs of the ledger."""

    __tablename__ = "knowledge_base_crawl_tasks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    knowledge_base_source_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("knowledge_base_sources.id"), index=True
    )
    root_url: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String, server_default=text("'pending'"), default="pending")
    urls_pending: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    urls_crawled: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    max_depth: Mapped[int] = mapped_column(Integer, server_default=text("3"), default=3)
    max_urls: Mapped[int] = mapped_column(Integer, server_default=text("200"), default=200)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)


class DocumentChunk(RailsTenant, RailsTimestamps, RailsBase):
    """One chunk of a polymorphic source (``source_type = 'KnowledgeBaseDocument'``).

    ``embedding`` is ``float8[]`` here: this mirror does not require pgvector. A database
    with pgvector stores ``vector`` instead; the column is read and written as a list of
    floats either way.
    """

    __tablename__ = "document_chunks"
    __table_args__ = (
        Index(
            "index_document_chunks_on_source_and_position",
            "source_type",
            "source_id",
            "position",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    source_type: Mapped[str] = mapped_column(String)
    source_id: Mapped[int] = mapped_column(BigInteger)
    position: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(String)
    token_count: Mapped[int | None] = mapped_column(Integer)
    embedding: Mapped[list[float] | None] = mapped_column(ARRAY(DOUBLE_PRECISION))
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=_EMPTY_JSONB, default=jsonb_object_default
    )


class PgSearchDocument(RailsTenant, RailsTimestamps, RailsBase):
    """pg_search multisearch row; ``content_tsvector`` is generated by PostgreSQL."""

    __tablename__ = "pg_search_documents"
    __table_args__ = (
        Index("index_pg_search_documents_on_searchable", "searchable_type", "searchable_id"),
        Index(
            "index_pg_search_documents_on_content_tsvector",
            "content_tsvector",
            postgresql_using="gin",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    searchable_type: Mapped[str] = mapped_column(String)
    searchable_id: Mapped[int] = mapped_column(BigInteger)
    content: Mapped[str | None] = mapped_column(Text)
    content_tsvector: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(PG_SEARCH_TSVECTOR_SQL, persisted=True)
    )


class Conversation(RailsTenant, RailsTimestamps, RailsBase):
    """A conversation; provider identity is (organization_data_source_id, external_id)."""

    __tablename__ = "conversations"
    __table_args__ = (
        Index(
            "index_conversations_on_data_source_and_external_id",
            "organization_data_source_id",
            "external_id",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    organization_data_source_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("organization_data_sources.id")
    )
    external_id: Mapped[str | None] = mapped_column(String)
    external_type: Mapped[str | None] = mapped_column(String)
    last_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: seconds, from the recording's duration (native upload processing; rails_0004).
    handling_time: Mapped[int | None] = mapped_column(Integer)


class ConversationUpload(RailsTenant, RailsTimestamps, RailsBase):
    """An uploaded recording batch; ``upload_type`` is ``presign`` or ``direct``.

    ``status``: pending, processing, completed, failed or expired.
    """

    __tablename__ = "conversation_uploads"
    __table_args__ = (
        Index(
            "index_conversation_uploads_on_org_id_and_idempotency_key",
            "organization_id",
            "idempotency_key",
            unique=True,
        ),
        Index("index_conversation_uploads_on_upload_type_and_status", "upload_type", "status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    conversation_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("conversations.id"), index=True
    )
    organization_data_source_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("organization_data_sources.id"), index=True
    )
    source: Mapped[str | None] = mapped_column(String)
    upload_type: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String, server_default=text("'pending'"), default="pending")
    blob_key: Mapped[str | None] = mapped_column(String)
    idempotency_key: Mapped[str | None] = mapped_column(String)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=_EMPTY_JSONB, default=jsonb_object_default
    )
    periodic_retry_count: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    last_processing_error: Mapped[str | None] = mapped_column(Text)
    last_processing_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    processing_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class FlipperFeature(RailsTimestamps, RailsBase):
    """Flipper's ActiveRecord adapter: one row per known feature."""

    __tablename__ = "flipper_features"
    __table_args__ = (Index("index_flipper_features_on_key", "key", unique=True),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    key: Mapped[str] = mapped_column(String)


class FlipperGate(RailsTimestamps, RailsBase):
    """Flipper's ActiveRecord adapter: gate values (``boolean`` = ``'true'``, actors...)."""

    __tablename__ = "flipper_gates"
    __table_args__ = (
        Index(
            "index_flipper_gates_on_feature_key_and_key_and_value",
            "feature_key",
            "key",
            "value",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    feature_key: Mapped[str] = mapped_column(String)
    key: Mapped[str] = mapped_column(String)
    value: Mapped[str | None] = mapped_column(Text)
