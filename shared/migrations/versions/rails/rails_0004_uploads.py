"""Rails tables conversation uploads read and write (delivery ledger, attachments, identities).

Mirrors, as Rails and its gems define them, of what the conversation-upload families of seed
001 read or write: the durable delivery ledger (``conversation_upload_deliveries``), Active
Storage's blobs and attachments, GoodJob's ``good_jobs`` (read by the zero-new-GoodJob bake
query), and the identity tables the native XCALLY / Outreach Kaia processors resolve
(integration profiles, clients, conversation parts, call details, memberships;
``employees`` comes from rails_0003).
``conversation_uploads`` and its ``idempotency_key`` unique index already come from
rails_0001; ``conversations`` gains ``handling_time``. Conventions as in rails_0001:
timestamps without time zone and no database default, Rails index and foreign-key names.

Revision ID: rails_0004
Revises: rails_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from shared.db.base import rails_foreign_key_name

revision: str = "rails_0004"
down_revision: str | Sequence[str] | None = "rails_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.BigInteger(), primary_key=True)


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    ]


def _reference(table: str, column: str, target: str, *, nullable: bool = False) -> list[Any]:
    """``t.references`` with ``foreign_key: true``: the column and its Rails-named key."""
    return [
        sa.Column(column, sa.BigInteger(), nullable=nullable),
        sa.ForeignKeyConstraint(
            [column], [f"{target}.id"], name=rails_foreign_key_name(table, column)
        ),
    ]


def _index(table: str, columns: list[str], *, name: str | None = None, **kw: Any) -> None:
    op.create_index(name or f"index_{table}_on_{'_and_'.join(columns)}", table, columns, **kw)


def _identity_tables() -> None:
    op.create_table(
        "integration_profiles",
        _id(),
        *_reference("integration_profiles", "organization_id", "organizations"),
        *_reference(
            "integration_profiles", "organization_data_source_id", "organization_data_sources"
        ),
        *_reference("integration_profiles", "employee_id", "employees"),
        sa.Column("external_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        *_timestamps(),
    )
    _index("integration_profiles", ["organization_id"])
    _index("integration_profiles", ["employee_id"])
    _index(
        "integration_profiles",
        ["organization_data_source_id", "external_id"],
        name="index_integration_profiles_on_data_source_and_external_id",
        unique=True,
    )

    op.create_table(
        "clients",
        _id(),
        *_reference("clients", "organization_id", "organizations"),
        sa.Column("phone", sa.String(), nullable=True),
        sa.Column("email", sa.String(), nullable=True),
        sa.Column("name", sa.String(), nullable=True),
        *_timestamps(),
    )
    _index("clients", ["organization_id"])
    _index("clients", ["organization_id", "phone"])
    _index("clients", ["organization_id", "email"])

    op.add_column("conversations", sa.Column("handling_time", sa.Integer(), nullable=True))

    op.create_table(
        "conversation_memberships",
        _id(),
        *_reference("conversation_memberships", "organization_id", "organizations"),
        *_reference("conversation_memberships", "conversation_id", "conversations"),
        sa.Column("member_type", sa.String(), nullable=False),
        sa.Column("member_id", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        *_timestamps(),
    )
    _index("conversation_memberships", ["organization_id"])
    _index(
        "conversation_memberships",
        ["conversation_id", "member_type", "member_id"],
        name="index_conversation_memberships_uniqueness",
        unique=True,
    )

    op.create_table(
        "conversation_parts",
        _id(),
        *_reference("conversation_parts", "organization_id", "organizations"),
        *_reference("conversation_parts", "conversation_id", "conversations"),
        sa.Column("external_id", sa.String(), nullable=False),
        sa.Column("part_type", sa.String(), nullable=False),
        sa.Column("author_type", sa.String(), nullable=True),
        sa.Column("author_id", sa.BigInteger(), nullable=True),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        *_timestamps(),
    )
    _index("conversation_parts", ["organization_id"])
    _index(
        "conversation_parts",
        ["conversation_id", "external_id"],
        name="index_conversation_parts_on_conversation_and_external_id",
        unique=True,
    )

    op.create_table(
        "call_details",
        _id(),
        *_reference("call_details", "organization_id", "organizations"),
        *_reference("call_details", "conversation_part_id", "conversation_parts"),
        sa.Column("external_id", sa.String(), nullable=True),
        sa.Column("direction", sa.String(), nullable=True),
        sa.Column("from_number", sa.String(), nullable=True),
        sa.Column("to_number", sa.String(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        *_timestamps(),
    )
    _index("call_details", ["organization_id"])
    _index("call_details", ["conversation_part_id"], unique=True)


def _active_storage_tables() -> None:
    # Active Storage's own migration (Rails 7), verbatim in columns and names.
    op.create_table(
        "active_storage_blobs",
        _id(),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("filename", sa.String(), nullable=False),
        sa.Column("content_type", sa.String(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=True),
        sa.Column("service_name", sa.String(), nullable=False),
        sa.Column("byte_size", sa.BigInteger(), nullable=False),
        sa.Column("checksum", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    _index("active_storage_blobs", ["key"], unique=True)
    op.create_table(
        "active_storage_attachments",
        _id(),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("record_type", sa.String(), nullable=False),
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        *_reference("active_storage_attachments", "blob_id", "active_storage_blobs"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    _index("active_storage_attachments", ["blob_id"])
    _index(
        "active_storage_attachments",
        ["record_type", "record_id", "name", "blob_id"],
        name="index_active_storage_attachments_uniqueness",
        unique=True,
    )


def _good_jobs() -> None:
    # GoodJob 4's good_jobs, the columns its install migration creates.
    op.create_table(
        "good_jobs",
        sa.Column(
            "id", postgresql.UUID(), server_default=sa.text("gen_random_uuid()"), primary_key=True
        ),
        sa.Column("queue_name", sa.Text(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=True),
        sa.Column("serialized_params", postgresql.JSONB(), nullable=True),
        sa.Column("scheduled_at", sa.DateTime(), nullable=True),
        sa.Column("performed_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        *_timestamps(),
        sa.Column("active_job_id", postgresql.UUID(), nullable=True),
        sa.Column("concurrency_key", sa.Text(), nullable=True),
        sa.Column("cron_key", sa.Text(), nullable=True),
        sa.Column("retried_good_job_id", postgresql.UUID(), nullable=True),
        sa.Column("cron_at", sa.DateTime(), nullable=True),
        sa.Column("batch_id", postgresql.UUID(), nullable=True),
        sa.Column("batch_callback_id", postgresql.UUID(), nullable=True),
        sa.Column("is_discrete", sa.Boolean(), nullable=True),
        sa.Column("executions_count", sa.Integer(), nullable=True),
        sa.Column("job_class", sa.Text(), nullable=True),
        sa.Column("error_event", sa.SmallInteger(), nullable=True),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("locked_by_id", postgresql.UUID(), nullable=True),
        sa.Column("locked_at", sa.DateTime(), nullable=True),
    )
    _index("good_jobs", ["active_job_id", "created_at"])
    _index("good_jobs", ["batch_id"])
    _index("good_jobs", ["job_class"])
    _index("good_jobs", ["queue_name", "scheduled_at"])


def _delivery_ledger() -> None:
    op.create_table(
        "conversation_upload_deliveries",
        _id(),
        *_reference("conversation_upload_deliveries", "organization_id", "organizations"),
        *_reference(
            "conversation_upload_deliveries", "conversation_upload_id", "conversation_uploads"
        ),
        *_reference(
            "conversation_upload_deliveries", "conversation_id", "conversations", nullable=True
        ),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("state", sa.String(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("owner", sa.String(), server_default=sa.text("'rails'"), nullable=False),
        sa.Column("delivery_key", sa.String(), nullable=False),
        sa.Column("sync_run_id", sa.String(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("replay_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("last_attempted_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("accepted_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("failed_at", sa.DateTime(), nullable=True),
        *_timestamps(),
    )
    table = "conversation_upload_deliveries"
    _index(table, ["organization_id"])
    _index(table, ["conversation_id"])
    _index(
        table,
        ["conversation_upload_id", "kind"],
        name="index_conversation_upload_deliveries_on_upload_and_kind",
        unique=True,
    )
    _index(table, ["delivery_key"], unique=True)
    _index(table, ["state", "updated_at"])


def upgrade() -> None:
    _identity_tables()
    _active_storage_tables()
    _good_jobs()
    _delivery_ledger()


def downgrade() -> None:
    for table in (
        "conversation_upload_deliveries",
        "good_jobs",
        "active_storage_attachments",
        "active_storage_blobs",
        "call_details",
        "conversation_parts",
        "conversation_memberships",
        "clients",
        "integration_profiles",
    ):
        op.drop_table(table)
    op.drop_column("conversations", "handling_time")
