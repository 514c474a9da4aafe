"""Knowledge-base connectors (seed 003) and the cause of every version.

* ``api2.kb_connections``: an organization's encrypted credentials for one provider.
* ``api2.kb_connector_bindings``: a knowledge base (or one document) bound to a connection,
  with its sync state and freshness clock.
* ``api2.kb_connector_items``: the provider items a binding landed as documents.
* ``kb_documents.submission_cause`` and ``kb_document_versions.cause``: which path (upload,
  recrawl, refresh, connector, feed, rollback) made a version current. Versions written
  before keep a NULL cause; documents already submitted count as uploads.

Revision ID: api2_0005
Revises: api2_0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "api2_0005"
down_revision: str | Sequence[str] | None = "api2_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "api2"
PROVIDERS = "provider IN ('notion', 'confluence', 'google_drive', 'sharepoint', 'zendesk')"
CAUSES = "'upload', 'recrawl', 'refresh', 'connector', 'feed', 'rollback'"


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "kb_connections",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("credentials", sa.LargeBinary(), nullable=False),
        sa.Column(
            "credential_fields",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="kb_connections_pkey"),
        sa.UniqueConstraint("organization_id", "id", name="uq_kb_connections_organization_id_id"),
        sa.UniqueConstraint(
            "organization_id",
            "provider",
            "name",
            name="uq_kb_connections_organization_id_provider_name",
        ),
        sa.CheckConstraint(PROVIDERS, name="ck_kb_connections_provider"),
        schema=SCHEMA,
    )
    op.create_table(
        "kb_connector_bindings",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("knowledge_base_id", sa.BigInteger(), nullable=False),
        sa.Column("connection_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=True),
        sa.Column("document_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "audience",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("pass_mode", sa.Text(), nullable=True),
        sa.Column("pass_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pass_complete", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("watermark", sa.Text(), nullable=True),
        sa.Column("last_synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sync_failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_sync_at", sa.DateTime(timezone=True), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="kb_connector_bindings_pkey"),
        sa.UniqueConstraint(
            "organization_id", "id", name="uq_kb_connector_bindings_organization_id_id"
        ),
        sa.ForeignKeyConstraint(
            ["organization_id", "knowledge_base_id"],
            [f"{SCHEMA}.knowledge_bases.organization_id", f"{SCHEMA}.knowledge_bases.id"],
            name="fk_kb_connector_bindings_knowledge_base",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id", "connection_id"],
            [f"{SCHEMA}.kb_connections.organization_id", f"{SCHEMA}.kb_connections.id"],
            name="fk_kb_connector_bindings_connection",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id", "document_id"],
            [f"{SCHEMA}.kb_documents.organization_id", f"{SCHEMA}.kb_documents.id"],
            name="fk_kb_connector_bindings_document",
        ),
        sa.CheckConstraint(PROVIDERS, name="ck_kb_connector_bindings_provider"),
        sa.CheckConstraint(
            "pass_mode IS NULL OR pass_mode IN ('full', 'incremental')",
            name="ck_kb_connector_bindings_pass_mode",
        ),
        schema=SCHEMA,
    )
    op.create_index(
        "ix_kb_connector_bindings_next_sync_at",
        "kb_connector_bindings",
        ["next_sync_at"],
        schema=SCHEMA,
    )
    op.create_table(
        "kb_connector_items",
        sa.Column("binding_id", sa.BigInteger(), nullable=False),
        sa.Column("external_id", sa.Text(), nullable=False),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("document_id", sa.BigInteger(), nullable=True),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("content_digest", sa.String(length=64), nullable=True),
        sa.Column("listed_at", sa.DateTime(timezone=True), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("binding_id", "external_id", name="kb_connector_items_pkey"),
        sa.ForeignKeyConstraint(
            ["organization_id", "binding_id"],
            [
                f"{SCHEMA}.kb_connector_bindings.organization_id",
                f"{SCHEMA}.kb_connector_bindings.id",
            ],
            name="fk_kb_connector_items_binding",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id", "document_id"],
            [f"{SCHEMA}.kb_documents.organization_id", f"{SCHEMA}.kb_documents.id"],
            name="fk_kb_connector_items_document",
        ),
        schema=SCHEMA,
    )
    op.create_index(
        "ix_kb_connector_items_binding_id_listed_at",
        "kb_connector_items",
        ["binding_id", "listed_at"],
        schema=SCHEMA,
    )
    op.add_column(
        "kb_documents",
        sa.Column(
            "submission_cause", sa.Text(), server_default=sa.text("'upload'"), nullable=False
        ),
        schema=SCHEMA,
    )
    op.create_check_constraint(
        "ck_kb_documents_submission_cause",
        "kb_documents",
        f"submission_cause IN ({CAUSES})",
        schema=SCHEMA,
    )
    op.add_column("kb_document_versions", sa.Column("cause", sa.Text()), schema=SCHEMA)
    op.create_check_constraint(
        "ck_kb_document_versions_cause",
        "kb_document_versions",
        f"cause IS NULL OR cause IN ({CAUSES})",
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_constraint("ck_kb_document_versions_cause", "kb_document_versions", schema=SCHEMA)
    op.drop_column("kb_document_versions", "cause", schema=SCHEMA)
    op.drop_constraint("ck_kb_documents_submission_cause", "kb_documents", schema=SCHEMA)
    op.drop_column("kb_documents", "submission_cause", schema=SCHEMA)
    op.drop_table("kb_connector_items", schema=SCHEMA)
    op.drop_table("kb_connector_bindings", schema=SCHEMA)
    op.drop_table("kb_connections", schema=SCHEMA)
