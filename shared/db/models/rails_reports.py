"""Mirrors of the Rails tables the daily agent evaluation reports read (schema ``public``).

Only what the reports read is modelled: a ticket rule's type (an organization is reportable
with a ``fixed_per_period`` rule or no rule at all), and the completed evaluations of each
agent that the native row collector (the port of ``QAEvaluationReport::RowCollector``)
aggregates per day. ``organizations.time_zone`` and ``organizations.demo`` are in
:mod:`shared.db.models.rails`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, String, text
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import RailsBase, RailsTenant, RailsTimestamps, SoftDeleted, UTCDateTime

#: ``ticket_rules.rule_type`` of the one kind of rule that keeps an organization reportable.
FIXED_PER_PERIOD = "fixed_per_period"


class TicketRule(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """An organization's ticket sampling rule; ``rule_type`` is ``fixed_per_period``,
    ``percentage``, ... ."""

    __tablename__ = "ticket_rules"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    rule_type: Mapped[str] = mapped_column(String)


class Employee(RailsTenant, RailsTimestamps, SoftDeleted, RailsBase):
    """An agent of an organization (the rows of a report are per agent). Shared by every
    family that reads agents (conversation uploads match them by email, then name)."""

    __tablename__ = "employees"
    __table_args__ = (
        Index("index_employees_on_organization_id_and_email", "organization_id", "email"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    email: Mapped[str | None] = mapped_column(String)
    name: Mapped[str | None] = mapped_column(String)


class Evaluation(RailsTenant, RailsTimestamps, RailsBase):
    """A QA evaluation of one agent's conversation; ``score`` is a percentage, set once
    ``status`` is ``completed`` (at ``completed_at``, UTC)."""

    __tablename__ = "evaluations"
    __table_args__ = (
        Index(
            "index_evaluations_on_organization_id_and_completed_at",
            "organization_id",
            "completed_at",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    employee_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("employees.id"), index=True)
    status: Mapped[str] = mapped_column(String, server_default=text("'pending'"), default="pending")
    score: Mapped[float | None] = mapped_column(DOUBLE_PRECISION)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
