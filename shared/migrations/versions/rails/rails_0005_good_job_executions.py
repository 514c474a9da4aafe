"""GoodJob's ``good_job_executions``: one row per execution of a ``good_jobs`` row.

Mirrored so seed 000's throttle-storm query (executions against unique jobs, throttle
failures counted per execution) runs as written: a job throttled several times and then
completed keeps no throttle error on its ``good_jobs`` row, only on its executions. The
columns GoodJob 4's install migration creates; conventions as in rails_0001.

Revision ID: rails_0005
Revises: rails_0004
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "rails_0005"
down_revision: str | Sequence[str] | None = "rails_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "good_job_executions",
        sa.Column(
            "id", postgresql.UUID(), server_default=sa.text("gen_random_uuid()"), primary_key=True
        ),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("active_job_id", postgresql.UUID(), nullable=False),
        sa.Column("job_class", sa.Text(), nullable=True),
        sa.Column("queue_name", sa.Text(), nullable=True),
        sa.Column("serialized_params", postgresql.JSONB(), nullable=True),
        sa.Column("scheduled_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_event", sa.SmallInteger(), nullable=True),
        sa.Column("error_backtrace", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("process_id", postgresql.UUID(), nullable=True),
        sa.Column("duration", sa.Interval(), nullable=True),
    )
    op.create_index(
        "index_good_job_executions_on_active_job_id_and_created_at",
        "good_job_executions",
        ["active_job_id", "created_at"],
    )
    op.create_index(
        "index_good_job_executions_on_process_id_and_created_at",
        "good_job_executions",
        ["process_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_table("good_job_executions")
