"""Typed models of the Rails-owned tables conversation uploads read and write.

Mirrors created by revision ``rails_0004``: the durable delivery ledger, Active Storage's
blobs and attachments, GoodJob's jobs table (its executions: ``rails_0005``), and the identity
tables the native XCALLY / Outreach Kaia processors resolve. Only the columns this project
uses are modelled.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    Interval,
    SmallInteger,
    String,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import RailsBase, RailsTenant, RailsTimestamps, UTCDateTime, utcnow


class ConversationUploadDelivery(RailsTenant, RailsTimestamps, RailsBase):
    """One hand-off of an upload to API2: ``kind`` ``process`` or ``sync_completion``.

    ``state``: pending -> sent | uncertain -> accepted -> completed, or failed (terminal).
    ``owner`` names the side expected to move the row (``rails`` or ``api2``).
    """

    __tablename__ = "conversation_upload_deliveries"
    __table_args__ = (
        Index(
            "index_conversation_upload_deliveries_on_upload_and_kind",
            "conversation_upload_id",
            "kind",
            unique=True,
        ),
        Index("index_conversation_upload_deliveries_on_delivery_key", "delivery_key", unique=True),
        Index(
            "index_conversation_upload_deliveries_on_state_and_updated_at", "state", "updated_at"
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    conversation_upload_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("conversation_uploads.id")
    )
    conversation_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("conversations.id"), index=True
    )
    kind: Mapped[str] = mapped_column(String)
    state: Mapped[str] = mapped_column(String, server_default=text("'pending'"), default="pending")
    owner: Mapped[str] = mapped_column(String, server_default=text("'rails'"), default="rails")
    delivery_key: Mapped[str] = mapped_column(String)
    sync_run_id: Mapped[str | None] = mapped_column(String)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    replay_count: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_attempted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    accepted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ActiveStorageBlob(RailsBase):
    """Active Storage's blob: ``key`` names the object in the service ``service_name``."""

    __tablename__ = "active_storage_blobs"
    __table_args__ = (Index("index_active_storage_blobs_on_key", "key", unique=True),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    key: Mapped[str] = mapped_column(String)
    filename: Mapped[str] = mapped_column(String)
    content_type: Mapped[str | None] = mapped_column(String)
    metadata_: Mapped[str | None] = mapped_column("metadata", Text)
    service_name: Mapped[str] = mapped_column(String)
    byte_size: Mapped[int] = mapped_column(BigInteger)
    checksum: Mapped[str | None] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ActiveStorageAttachment(RailsBase):
    """Active Storage's polymorphic join: ``record_type``/``record_id`` has ``name`` -> blob."""

    __tablename__ = "active_storage_attachments"
    __table_args__ = (
        Index(
            "index_active_storage_attachments_uniqueness",
            "record_type",
            "record_id",
            "name",
            "blob_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(String)
    record_type: Mapped[str] = mapped_column(String)
    record_id: Mapped[int] = mapped_column(BigInteger)
    blob_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("active_storage_blobs.id"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class GoodJob(RailsBase):
    """GoodJob 4's ``good_jobs`` (read by the zero-new-GoodJob bake check)."""

    __tablename__ = "good_jobs"
    __table_args__ = (
        Index("index_good_jobs_on_active_job_id_and_created_at", "active_job_id", "created_at"),
        Index("index_good_jobs_on_batch_id", "batch_id"),
        Index("index_good_jobs_on_job_class", "job_class"),
        Index("index_good_jobs_on_queue_name_and_scheduled_at", "queue_name", "scheduled_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(
        UUID, primary_key=True, server_default=text("gen_random_uuid()")
    )
    queue_name: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int | None] = mapped_column(Integer)
    serialized_params: Mapped[dict[str, object] | None] = mapped_column(JSONB)
    scheduled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    performed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    active_job_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    concurrency_key: Mapped[str | None] = mapped_column(Text)
    cron_key: Mapped[str | None] = mapped_column(Text)
    retried_good_job_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    cron_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    batch_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    batch_callback_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    is_discrete: Mapped[bool | None] = mapped_column(Boolean)
    executions_count: Mapped[int | None] = mapped_column(Integer)
    job_class: Mapped[str | None] = mapped_column(Text)
    error_event: Mapped[int | None] = mapped_column(SmallInteger)
    labels: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    locked_by_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    locked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class GoodJobExecution(RailsBase):
    """GoodJob 4's ``good_job_executions``: one row per run of a job (rails_0005), read by
    seed 000's throttle-storm query."""

    __tablename__ = "good_job_executions"
    __table_args__ = (
        Index(
            "index_good_job_executions_on_active_job_id_and_created_at",
            "active_job_id",
            "created_at",
        ),
        Index("index_good_job_executions_on_process_id_and_created_at", "process_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(
        UUID, primary_key=True, server_default=text("gen_random_uuid()")
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    active_job_id: Mapped[uuid.UUID] = mapped_column(UUID)
    job_class: Mapped[str | None] = mapped_column(Text)
    queue_name: Mapped[str | None] = mapped_column(Text)
    serialized_params: Mapped[dict[str, object] | None] = mapped_column(JSONB)
    scheduled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    error_event: Mapped[int | None] = mapped_column(SmallInteger)
    error_backtrace: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    process_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    duration: Mapped[timedelta | None] = mapped_column(Interval)


class IntegrationProfile(RailsTenant, RailsTimestamps, RailsBase):
    """An employee's identity at one data source (``external_id``: the provider's agent id)."""

    __tablename__ = "integration_profiles"
    __table_args__ = (
        Index(
            "index_integration_profiles_on_data_source_and_external_id",
            "organization_data_source_id",
            "external_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    organization_data_source_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("organization_data_sources.id")
    )
    employee_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("employees.id"), index=True)
    external_id: Mapped[str] = mapped_column(String)
    name: Mapped[str | None] = mapped_column(String)


class Client(RailsTenant, RailsTimestamps, RailsBase):
    """A customer; matched by phone, then email, then name."""

    __tablename__ = "clients"
    __table_args__ = (
        Index("index_clients_on_organization_id_and_phone", "organization_id", "phone"),
        Index("index_clients_on_organization_id_and_email", "organization_id", "email"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    phone: Mapped[str | None] = mapped_column(String)
    email: Mapped[str | None] = mapped_column(String)
    name: Mapped[str | None] = mapped_column(String)


class ConversationMembership(RailsTenant, RailsTimestamps, RailsBase):
    """Links a conversation to an employee (``role`` agent) or a client (``role`` client)."""

    __tablename__ = "conversation_memberships"
    __table_args__ = (
        Index(
            "index_conversation_memberships_uniqueness",
            "conversation_id",
            "member_type",
            "member_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("conversations.id"))
    member_type: Mapped[str] = mapped_column(String)
    member_id: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(String)


class ConversationPart(RailsTenant, RailsTimestamps, RailsBase):
    """One part of a conversation; identity is (conversation_id, external_id)."""

    __tablename__ = "conversation_parts"
    __table_args__ = (
        Index(
            "index_conversation_parts_on_conversation_and_external_id",
            "conversation_id",
            "external_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("conversations.id"))
    external_id: Mapped[str] = mapped_column(String)
    part_type: Mapped[str] = mapped_column(String)
    author_type: Mapped[str | None] = mapped_column(String)
    author_id: Mapped[int | None] = mapped_column(BigInteger)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class CallDetail(RailsTenant, RailsTimestamps, RailsBase):
    """A call part's details; its ``recording`` is an Active Storage attachment."""

    __tablename__ = "call_details"
    __table_args__ = (
        Index("index_call_details_on_conversation_part_id", "conversation_part_id", unique=True),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    conversation_part_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("conversation_parts.id")
    )
    external_id: Mapped[str | None] = mapped_column(String)
    direction: Mapped[str | None] = mapped_column(String)
    from_number: Mapped[str | None] = mapped_column(String)
    to_number: Mapped[str | None] = mapped_column(String)
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
