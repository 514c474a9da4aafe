"""Rails-owned tables, as the Rails schema has them (development, tests and demo only).

Never applied to a database Rails owns: there Rails' own migrations created these tables.
Timestamps are ``timestamp without time zone`` holding UTC with no database default, as
Rails writes them; foreign keys carry Rails' ``fk_rails_<hash>`` names.

Revision ID: rails_0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "rails_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("rails",)
depends_on: str | Sequence[str] | None = None

_EMPTY_JSONB = sa.text("'{}'::jsonb")


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.BigInteger(), primary_key=True)


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    ]


def _discarded_at() -> sa.Column[object]:
    return sa.Column("discarded_at", sa.DateTime(), nullable=True)


def _organization(fk_name: str) -> list[Any]:
    return [
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"], name=fk_name),
    ]


def _jsonb(name: str) -> sa.Column[object]:
    return sa.Column(name, postgresql.JSONB(), server_default=_EMPTY_JSONB, nullable=False)


def _index(table: str, columns: list[str], *, name: str | None = None, **kw: Any) -> None:
    op.create_index(name or f"index_{table}_on_{'_'.join(columns)}", table, columns, **kw)


def upgrade() -> None:
    # One unit, however long: a migration's upgrade is the list of what it creates, in the
    # order the foreign keys need; split, it would only scatter that list.
    op.create_table(
        "organizations",
        _id(),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("time_zone", sa.String(), server_default=sa.text("'UTC'"), nullable=False),
        sa.Column("demo", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        *_timestamps(),
        _discarded_at(),
    )

    op.create_table(
        "data_sources",
        _id(),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        *_timestamps(),
    )
    _index("data_sources", ["key"], unique=True)

    op.create_table(
        "organization_data_sources",
        _id(),
        *_organization("fk_rails_a4b8a4353d"),
        sa.Column("data_source_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        _jsonb("settings"),
        sa.Column("last_synced_at", sa.DateTime(), nullable=True),
        *_timestamps(),
        _discarded_at(),
        sa.ForeignKeyConstraint(
            ["data_source_id"], ["data_sources.id"], name="fk_rails_cc054acbe9"
        ),
    )
    _index("organization_data_sources", ["organization_id"])
    _index("organization_data_sources", ["data_source_id"])

    op.create_table(
        "knowledge_base_sources",
        _id(),
        *_organization("fk_rails_ab9460e884"),
        sa.Column("organization_data_source_id", sa.BigInteger(), nullable=True),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        _jsonb("settings"),
        sa.Column("sync_status", sa.String(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("last_synced_at", sa.DateTime(), nullable=True),
        sa.Column("last_sync_error", sa.Text(), nullable=True),
        *_timestamps(),
        _discarded_at(),
        sa.ForeignKeyConstraint(
            ["organization_data_source_id"],
            ["organization_data_sources.id"],
            name="fk_rails_efd44de6d6",
        ),
    )
    _index("knowledge_base_sources", ["organization_id"])
    _index("knowledge_base_sources", ["organization_data_source_id"])

    op.create_table(
        "knowledge_base_documents",
        _id(),
        *_organization("fk_rails_80cc88138c"),
        sa.Column("knowledge_base_source_id", sa.BigInteger(), nullable=True),
        sa.Column("source_type", sa.String(), nullable=False),
        sa.Column("source_identifier", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=True),
        sa.Column("url", sa.String(), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_hash", sa.String(), nullable=True),
        sa.Column("locale", sa.String(), nullable=True),
        sa.Column("last_synced_at", sa.DateTime(), nullable=True),
        sa.Column("chunks_synced_at", sa.DateTime(), nullable=True),
        _jsonb("metadata"),
        *_timestamps(),
        _discarded_at(),
        sa.ForeignKeyConstraint(
            ["knowledge_base_source_id"], ["knowledge_base_sources.id"], name="fk_rails_5d14938d77"
        ),
    )
    _index("knowledge_base_documents", ["organization_id"])
    _index(
        "knowledge_base_documents",
        ["knowledge_base_source_id", "source_identifier"],
        name="index_knowledge_base_documents_on_source_and_identifier",
    )

    op.create_table(
        "knowledge_base_sections",
        _id(),
        *_organization("fk_rails_38acd4a59d"),
        sa.Column("knowledge_base_source_id", sa.BigInteger(), nullable=False),
        sa.Column("parent_id", sa.BigInteger(), nullable=True),
        sa.Column("source_identifier", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("url", sa.String(), nullable=True),
        sa.Column("locale", sa.String(), nullable=True),
        sa.Column("position", sa.Integer(), nullable=True),
        *_timestamps(),
        _discarded_at(),
        sa.ForeignKeyConstraint(
            ["knowledge_base_source_id"], ["knowledge_base_sources.id"], name="fk_rails_e9af9875bb"
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["knowledge_base_sections.id"], name="fk_rails_69aaf55147"
        ),
    )
    _index("knowledge_base_sections", ["organization_id"])
    _index("knowledge_base_sections", ["parent_id"])
    _index(
        "knowledge_base_sections",
        ["knowledge_base_source_id", "source_identifier"],
        name="index_knowledge_base_sections_on_source_and_identifier",
    )

    op.create_table(
        "knowledge_base_document_sections",
        _id(),
        *_organization("fk_rails_56280a6ef2"),
        sa.Column("knowledge_base_document_id", sa.BigInteger(), nullable=False),
        sa.Column("knowledge_base_section_id", sa.BigInteger(), nullable=False),
        *_timestamps(),
        sa.ForeignKeyConstraint(
            ["knowledge_base_document_id"],
            ["knowledge_base_documents.id"],
            name="fk_rails_4c9e14a0ac",
        ),
        sa.ForeignKeyConstraint(
            ["knowledge_base_section_id"],
            ["knowledge_base_sections.id"],
            name="fk_rails_2b3d14c4e2",
        ),
    )
    _index("knowledge_base_document_sections", ["organization_id"])
    _index(
        "knowledge_base_document_sections",
        ["knowledge_base_document_id", "knowledge_base_section_id"],
        name="index_kb_document_sections_on_document_and_section",
        unique=True,
    )
    _index(
        "knowledge_base_document_sections",
        ["knowledge_base_section_id"],
        name="index_kb_document_sections_on_section_id",
    )

    op.create_table(
        "knowledge_base_crawl_tasks",
        _id(),
        *_organization("fk_rails_c77753a661"),
        sa.Column("knowledge_base_source_id", sa.BigInteger(), nullable=False),
        sa.Column("root_url", sa.String(), nullable=False),
        sa.Column("status", sa.String(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("urls_pending", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("urls_crawled", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_depth", sa.Integer(), server_default=sa.text("3"), nullable=False),
        sa.Column("max_urls", sa.Integer(), server_default=sa.text("200"), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        *_timestamps(),
        sa.ForeignKeyConstraint(
            ["knowledge_base_source_id"], ["knowledge_base_sources.id"], name="fk_rails_c18fbafb29"
        ),
    )
    _index("knowledge_base_crawl_tasks", ["organization_id"])
    _index("knowledge_base_crawl_tasks", ["knowledge_base_source_id"])

    op.create_table(
        "document_chunks",
        _id(),
        *_organization("fk_rails_2685223853"),
        sa.Column("source_type", sa.String(), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(), nullable=True),
        sa.Column("token_count", sa.Integer(), nullable=True),
        # float8[]: pgvector is not required by this mirror.
        sa.Column("embedding", postgresql.ARRAY(postgresql.DOUBLE_PRECISION()), nullable=True),
        _jsonb("metadata"),
        *_timestamps(),
    )
    _index("document_chunks", ["organization_id"])
    _index(
        "document_chunks",
        ["source_type", "source_id", "position"],
        name="index_document_chunks_on_source_and_position",
        unique=True,
    )

    op.create_table(
        "pg_search_documents",
        _id(),
        *_organization("fk_rails_eda88ce3b8"),
        sa.Column("searchable_type", sa.String(), nullable=False),
        sa.Column("searchable_id", sa.BigInteger(), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column(
            "content_tsvector",
            postgresql.TSVECTOR(),
            sa.Computed(
                "to_tsvector('simple'::regconfig, COALESCE(content, ''::text))", persisted=True
            ),
            nullable=True,
        ),
        *_timestamps(),
    )
    _index("pg_search_documents", ["organization_id"])
    _index(
        "pg_search_documents",
        ["searchable_type", "searchable_id"],
        name="index_pg_search_documents_on_searchable",
    )
    _index("pg_search_documents", ["content_tsvector"], postgresql_using="gin")

    op.create_table(
        "conversations",
        _id(),
        *_organization("fk_rails_f8cc8553d4"),
        sa.Column("organization_data_source_id", sa.BigInteger(), nullable=True),
        sa.Column("external_id", sa.String(), nullable=True),
        sa.Column("external_type", sa.String(), nullable=True),
        sa.Column("last_synced_at", sa.DateTime(), nullable=True),
        *_timestamps(),
        sa.ForeignKeyConstraint(
            ["organization_data_source_id"],
            ["organization_data_sources.id"],
            name="fk_rails_e05663a3c8",
        ),
    )
    _index("conversations", ["organization_id"])
    _index(
        "conversations",
        ["organization_data_source_id", "external_id"],
        name="index_conversations_on_data_source_and_external_id",
    )

    op.create_table(
        "conversation_uploads",
        _id(),
        *_organization("fk_rails_5555b469f5"),
        sa.Column("conversation_id", sa.BigInteger(), nullable=True),
        sa.Column("organization_data_source_id", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(), nullable=True),
        sa.Column("upload_type", sa.String(), nullable=False),
        sa.Column("status", sa.String(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("blob_key", sa.String(), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        _jsonb("metadata"),
        sa.Column(
            "periodic_retry_count", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("last_processing_error", sa.Text(), nullable=True),
        sa.Column("last_processing_error_at", sa.DateTime(), nullable=True),
        sa.Column("processing_started_at", sa.DateTime(), nullable=True),
        sa.Column("processed_at", sa.DateTime(), nullable=True),
        *_timestamps(),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name="fk_rails_4c0b3b2abd"
        ),
        sa.ForeignKeyConstraint(
            ["organization_data_source_id"],
            ["organization_data_sources.id"],
            name="fk_rails_049fa4b6ee",
        ),
    )
    _index("conversation_uploads", ["organization_id"])
    _index("conversation_uploads", ["conversation_id"])
    _index("conversation_uploads", ["organization_data_source_id"])
    _index(
        "conversation_uploads",
        ["organization_id", "idempotency_key"],
        name="index_conversation_uploads_on_org_id_and_idempotency_key",
        unique=True,
    )
    _index(
        "conversation_uploads",
        ["upload_type", "status"],
        name="index_conversation_uploads_on_upload_type_and_status",
    )

    # Flipper's ActiveRecord adapter schema, verbatim.
    op.create_table(
        "flipper_features",
        _id(),
        sa.Column("key", sa.String(), nullable=False),
        *_timestamps(),
    )
    _index("flipper_features", ["key"], unique=True)
    op.create_table(
        "flipper_gates",
        _id(),
        sa.Column("feature_key", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        *_timestamps(),
    )
    _index(
        "flipper_gates",
        ["feature_key", "key", "value"],
        name="index_flipper_gates_on_feature_key_and_key_and_value",
        unique=True,
    )


def downgrade() -> None:
    for table in (
        "flipper_gates",
        "flipper_features",
        "conversation_uploads",
        "conversations",
        "pg_search_documents",
        "document_chunks",
        "knowledge_base_crawl_tasks",
        "knowledge_base_document_sections",
        "knowledge_base_sections",
        "knowledge_base_documents",
        "knowledge_base_sources",
        "organization_data_sources",
        "data_sources",
        "organizations",
    ):
        op.drop_table(table)
