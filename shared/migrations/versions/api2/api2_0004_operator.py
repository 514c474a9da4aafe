"""Operator surface: audit of actions taken from the dashboard.

Reserved in the revision chain so that work in progress on several branches of the code
does not fork Alembic's history; the owner of this revision fills it in.

Revision ID: api2_0004
Revises: api2_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "api2_0004"
down_revision: str | Sequence[str] | None = "api2_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
