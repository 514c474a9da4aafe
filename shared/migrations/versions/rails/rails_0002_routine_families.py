"""Rails tables the routine families of seed 001 read or write: the outbound delivery
claims ledger, and the counter-cache parents and children the native repair recomputes.

Never applied to a database Rails owns (there Rails' own migrations created them).

Revision ID: rails_0002
Revises: rails_0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "rails_0002"
down_revision: str | Sequence[str] | None = "rails_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (parent, counter column, child, foreign key column, Rails' foreign key name)
_COUNTER_CACHES = (
    (
        "assignment_queues",
        "assignment_queue_memberships_count",
        "assignment_queue_memberships",
        "assignment_queue_id",
        "fk_rails_5bc79a0f84",
    ),
    ("groups", "group_employees_count", "group_employees", "group_id", "fk_rails_8e5745870e"),
    ("sheets", "sheet_rows_count", "sheet_rows", "sheet_id", "fk_rails_aab1f072bf"),
)


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "outbound_delivery_claims",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("delivery_key", sa.String(), nullable=False),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        *_timestamps(),
    )
    op.create_index(
        "index_outbound_delivery_claims_on_delivery_key",
        "outbound_delivery_claims",
        ["delivery_key"],
        unique=True,
    )
    for parent, counter, child, column, fk_name in _COUNTER_CACHES:
        op.create_table(
            parent,
            sa.Column("id", sa.BigInteger(), primary_key=True),
            sa.Column(counter, sa.Integer(), server_default=sa.text("0"), nullable=False),
            *_timestamps(),
        )
        op.create_table(
            child,
            sa.Column("id", sa.BigInteger(), primary_key=True),
            sa.Column(column, sa.BigInteger(), nullable=False),
            *_timestamps(),
            sa.ForeignKeyConstraint([column], [f"{parent}.id"], name=fk_name),
        )
        op.create_index(f"index_{child}_on_{column}", child, [column])


def downgrade() -> None:
    for parent, _counter, child, _column, _fk in reversed(_COUNTER_CACHES):
        op.drop_table(child)
        op.drop_table(parent)
    op.drop_table("outbound_delivery_claims")
