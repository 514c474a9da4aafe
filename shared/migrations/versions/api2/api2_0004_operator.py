"""Operator surface: audit of actions taken from the dashboard.

``api2.operator_actions``: one row per action an operator took on the dashboard (retry or
discard a failed job, toggle a kill switch, resolve a delivery claim), with who and when.

Revision ID: api2_0004
Revises: api2_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "api2_0004"
down_revision: str | Sequence[str] | None = "api2_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_actions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("operator", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        schema="api2",
    )
    op.create_index(
        "ix_operator_actions_target_at", "operator_actions", ["target", "at"], schema="api2"
    )


def downgrade() -> None:
    op.drop_table("operator_actions", schema="api2")
