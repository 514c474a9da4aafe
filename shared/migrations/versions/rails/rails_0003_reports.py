"""Rails tables the daily agent evaluation reports read: ticket rules (reportable
organizations), employees and their evaluations (the native row collector).

``organizations.time_zone`` and ``organizations.demo`` come from rails_0001. Development,
tests and demo only, like every revision of the ``rails`` branch.

Revision ID: rails_0003
Revises: rails_0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from shared.db.base import rails_foreign_key_name

revision: str = "rails_0003"
down_revision: str | Sequence[str] | None = "rails_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tenant_table(name: str, *columns: sa.Column[object] | sa.ForeignKeyConstraint) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("organization_id", sa.BigInteger(), nullable=False),
        *columns,
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=rails_foreign_key_name(name, "organization_id"),
        ),
    )
    op.create_index(f"index_{name}_on_organization_id", name, ["organization_id"])


def upgrade() -> None:
    _tenant_table(
        "ticket_rules",
        sa.Column("rule_type", sa.String(), nullable=False),
        sa.Column("discarded_at", sa.DateTime(), nullable=True),
    )
    _tenant_table(
        "employees",
        sa.Column("email", sa.String(), nullable=True),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("discarded_at", sa.DateTime(), nullable=True),
    )
    op.create_index(
        "index_employees_on_organization_id_and_email", "employees", ["organization_id", "email"]
    )
    _tenant_table(
        "evaluations",
        sa.Column("employee_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("score", postgresql.DOUBLE_PRECISION(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["employee_id"],
            ["employees.id"],
            name=rails_foreign_key_name("evaluations", "employee_id"),
        ),
    )
    op.create_index("index_evaluations_on_employee_id", "evaluations", ["employee_id"])
    op.create_index(
        "index_evaluations_on_organization_id_and_completed_at",
        "evaluations",
        ["organization_id", "completed_at"],
    )


def downgrade() -> None:
    for table in ("evaluations", "employees", "ticket_rules"):
        op.drop_table(table)
