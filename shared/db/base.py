"""Declarative bases: one metadata for the Rails-owned tables, one for this project's own.

Two metadata objects keep the ownership boundary visible in code. ``RailsBase`` mirrors
tables the Rails application owns (schema ``public``); their migrations form the ``rails``
branch, used for development, tests and the demo, and never applied to a database Rails
owns. ``Api2Base`` holds the tables this project owns, all in schema ``api2``; their
migrations form the ``api2`` branch, which runs everywhere.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    ForeignKey,
    ForeignKeyConstraint,
    MetaData,
    Table,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

API2_SCHEMA = "api2"


def rails_foreign_key_name(table_name: str, column_name: str) -> str:
    """The name Rails' ``add_foreign_key`` gives: ``fk_rails_`` + 10 hex of a SHA-256."""
    digest = hashlib.sha256(f"{table_name}_{column_name}_fk".encode()).hexdigest()
    return f"fk_rails_{digest[:10]}"


def _rails_fk_hash(constraint: ForeignKeyConstraint, table: Table) -> str:
    return rails_foreign_key_name(table.name, constraint.column_keys[0])[len("fk_rails_") :]


# Rails' own names for indexes and foreign keys.
_RAILS_NAMING: dict[str, Any] = {
    "rails_fk_hash": _rails_fk_hash,
    "ix": "index_%(table_name)s_on_%(column_0_N_name)s",
    "uq": "index_%(table_name)s_on_%(column_0_N_name)s",
    "fk": "fk_rails_%(rails_fk_hash)s",
    "ck": "chk_%(table_name)s_%(constraint_name)s",
    "pk": "%(table_name)s_pkey",
}
_API2_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "%(table_name)s_pkey",
}


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Rails' ``timestamp without time zone`` column holding UTC, seen from Python as aware UTC.

    Rails stores UTC wall-clock time in columns without a time zone. This type writes any
    aware datetime converted to UTC (naive values are taken to be UTC already) and reads
    values back as aware UTC, so Python code never compares naive and aware datetimes.
    """

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class RailsBase(DeclarativeBase):
    """Base of the models mirroring Rails-owned tables (schema ``public``).

    The models declare no relationships on purpose: every read of tenant data goes
    through :mod:`shared.db.tenant`, and a lazy load would bypass its organization filter.
    """

    metadata = MetaData(naming_convention=_RAILS_NAMING)


class Api2Base(DeclarativeBase):
    """Base of the models for tables this project owns (schema ``api2``)."""

    metadata = MetaData(schema=API2_SCHEMA, naming_convention=_API2_NAMING)


class RailsTimestamps:
    """``t.timestamps``: both NOT NULL, set by the application (no database default)."""

    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class SoftDeleted:
    """``discarded_at`` of the discard gem: a row with a value is soft-deleted."""

    discarded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class RailsTenant:
    """``t.references :organization, null: false, foreign_key: true`` (indexed)."""

    @declared_attr
    def organization_id(cls) -> Mapped[int]:
        return mapped_column(BigInteger, ForeignKey("organizations.id"), index=True)


def jsonb_object_default() -> dict[str, Any]:
    """Python-side default of a ``jsonb NOT NULL DEFAULT '{}'`` column."""
    return {}
