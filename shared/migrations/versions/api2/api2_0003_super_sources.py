"""Super sources (seed 004): connections, import checkpoints and indexed nodes.

Connections keep their credentials plain (JSONB); see ``shared.db.models.super_sources``.

Revision ID: api2_0003
Revises: api2_0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "api2_0003"
down_revision: str | Sequence[str] | None = "api2_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "api2"


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    if nullable:
        return sa.Column(name, sa.DateTime(timezone=True), nullable=True)
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _connection_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["organization_id", "connection_id"],
        [
            f"{SCHEMA}.super_source_connections.organization_id",
            f"{SCHEMA}.super_source_connections.id",
        ],
        name=f"fk_{table}_connection",
        ondelete="CASCADE",
    )


def upgrade() -> None:
    op.create_table(
        "super_source_connections",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), primary_key=True),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("knowledge_base_id", sa.BigInteger(), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column(
            "credentials",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("webhook_key", sa.Text(), nullable=True),
        sa.Column("webhook_secret", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.UniqueConstraint(
            "organization_id", "id", name="uq_super_source_connections_organization_id_id"
        ),
        sa.ForeignKeyConstraint(
            ["organization_id", "knowledge_base_id"],
            [f"{SCHEMA}.knowledge_bases.organization_id", f"{SCHEMA}.knowledge_bases.id"],
            name="fk_super_source_connections_knowledge_base",
        ),
        schema=SCHEMA,
    )
    op.create_index(
        "uq_super_source_connections_webhook_key",
        "super_source_connections",
        ["source", "webhook_key"],
        unique=True,
        schema=SCHEMA,
        postgresql_where=sa.text("webhook_key IS NOT NULL"),
    )
    op.create_table(
        "super_source_imports",
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("connection_id", sa.BigInteger(), nullable=False),
        sa.Column("root_node_type", sa.Text(), nullable=False),
        sa.Column("root_node_id", sa.Text(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("since", sa.Text(), nullable=True),
        sa.Column("watermark", sa.Text(), nullable=True),
        sa.Column("pages", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("nodes_scheduled", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        _timestamp("started_at", nullable=True),
        _timestamp("completed_at", nullable=True),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint(
            "organization_id",
            "connection_id",
            "root_node_type",
            "root_node_id",
            name="super_source_imports_pkey",
        ),
        _connection_fk("super_source_imports"),
        schema=SCHEMA,
    )
    op.create_table(
        "super_source_nodes",
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("connection_id", sa.BigInteger(), nullable=False),
        sa.Column("node_type", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("document_id", sa.BigInteger(), nullable=True),
        sa.Column("synchronization_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        _timestamp("indexed_at"),
        sa.PrimaryKeyConstraint(
            "organization_id",
            "connection_id",
            "node_type",
            "node_id",
            name="super_source_nodes_pkey",
        ),
        _connection_fk("super_source_nodes"),
        sa.ForeignKeyConstraint(
            ["organization_id", "document_id"],
            [f"{SCHEMA}.kb_documents.organization_id", f"{SCHEMA}.kb_documents.id"],
            name="fk_super_source_nodes_document",
        ),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_table("super_source_nodes", schema=SCHEMA)
    op.drop_table("super_source_imports", schema=SCHEMA)
    op.drop_index(
        "uq_super_source_connections_webhook_key",
        table_name="super_source_connections",
        schema=SCHEMA,
    )
    op.drop_table("super_source_connections", schema=SCHEMA)
