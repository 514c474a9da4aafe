"""Rails-owned tables the routine families of seed 001 read or write (schema ``public``).

``outbound_delivery_claims`` is the ledger every outbound send is claimed in before the
irreversible call (``services.rails.delivery_claims``); the counter-cache pairs are the
parents and children whose counters the native counter-cache repair recomputes (only the
columns that repair reads and writes).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import RailsBase, RailsTimestamps, UTCDateTime


class OutboundDeliveryClaim(RailsTimestamps, RailsBase):
    """One outbound send, claimed before it is made (Rails' ``OutboundDeliveryClaim``).

    ``delivered_at`` set: the send landed (``mark_delivered!``). Null: a send is in flight
    or its outcome is uncertain (``unresolved``). A proven non-delivery deletes the row
    (``release!``) so a retry claims it again.
    """

    __tablename__ = "outbound_delivery_claims"
    __table_args__ = (
        Index("index_outbound_delivery_claims_on_delivery_key", "delivery_key", unique=True),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    delivery_key: Mapped[str] = mapped_column(String)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


def _counter() -> Mapped[int]:
    return mapped_column(Integer, server_default=text("0"), default=0)


class AssignmentQueue(RailsTimestamps, RailsBase):
    """``assignment_queues.assignment_queue_memberships_count`` (counter cache)."""

    __tablename__ = "assignment_queues"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    assignment_queue_memberships_count: Mapped[int] = _counter()


class AssignmentQueueMembership(RailsTimestamps, RailsBase):
    """``belongs_to :assignment_queue, counter_cache: true``."""

    __tablename__ = "assignment_queue_memberships"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    assignment_queue_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("assignment_queues.id"), index=True
    )


class Group(RailsTimestamps, RailsBase):
    """``groups.group_employees_count`` (counter cache)."""

    __tablename__ = "groups"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    group_employees_count: Mapped[int] = _counter()


class GroupEmployee(RailsTimestamps, RailsBase):
    """``belongs_to :group, counter_cache: true``."""

    __tablename__ = "group_employees"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    group_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("groups.id"), index=True)


class Sheet(RailsTimestamps, RailsBase):
    """``sheets.sheet_rows_count`` (counter cache)."""

    __tablename__ = "sheets"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    sheet_rows_count: Mapped[int] = _counter()


class SheetRow(RailsTimestamps, RailsBase):
    """``belongs_to :sheet, counter_cache: true``."""

    __tablename__ = "sheet_rows"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    sheet_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("sheets.id"), index=True)
