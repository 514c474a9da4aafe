"""Schema api2 and the crawl ledger, knowledge_base_crawl_task_urls.

The schema is created here as well as by ``env.py`` (which needs it first, for the version
table) so that offline SQL (``alembic upgrade --sql``) is complete. The downgrade leaves
the schema in place: the Alembic version table lives in it.

Revision ID: api2_0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "api2_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("api2",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS api2")
    op.create_table(
        "knowledge_base_crawl_task_urls",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), primary_key=True),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        sa.Column("crawl_task_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("url_hash", sa.String(length=64), nullable=False),
        sa.Column("parent_url", sa.Text(), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        schema="api2",
    )
    op.create_index(
        "uq_knowledge_base_crawl_task_urls_org_task_url",
        "knowledge_base_crawl_task_urls",
        ["organization_id", "crawl_task_id", "url"],
        unique=True,
        schema="api2",
    )


def downgrade() -> None:
    op.drop_table("knowledge_base_crawl_task_urls", schema="api2")
