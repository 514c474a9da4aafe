"""The reports' SQL over the mirrored Rails tables.

Reportable organizations are ``SendDailyAgentEvaluationReportJob``'s selection: not demo, not
discarded, and either no live ticket rule at all or at least one ``fixed_per_period`` rule.
The native row collector (the port of ``QAEvaluationReport::RowCollector``) aggregates one
organization's completed evaluations per agent over that organization's local day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Numeric, and_, exists, func, not_, or_, select, text
from sqlalchemy.orm import Session

from services.reports.dates import local_day_bounds
from shared.db.models.rails import Organization
from shared.db.models.rails_reports import FIXED_PER_PERIOD, Employee, Evaluation, TicketRule
from shared.db.models.rails_uploads import GoodJob

#: The GoodJob classes this family replaces (the rollout assertion: no new rows).
REPLACED_JOB_CLASSES = (
    "SendDailyAgentEvaluationReportJob",
    "SendDailyAgentEvaluationReportForOrganizationJob",
)
#: The seed's bound on one native collection (``SET LOCAL``: this transaction only).
COLLECT_STATEMENT_TIMEOUT = "5min"
COMPLETED = "completed"


@dataclass(frozen=True)
class ReportableOrganization:
    id: int
    name: str
    time_zone: str


@dataclass(frozen=True)
class ReportRow:
    """One agent's line of a daily report (the CSV's and the Slack section's fields)."""

    agent_id: int
    agent_name: str | None
    agent_email: str | None
    evaluations: int
    average_score: float | None
    lowest_score: float | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReportRow:
        return cls(
            agent_id=int(data["agent_id"]),
            agent_name=data.get("agent_name"),
            agent_email=data.get("agent_email"),
            evaluations=int(data["evaluations"]),
            average_score=_float(data.get("average_score")),
            lowest_score=_float(data.get("lowest_score")),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _live_rules(organization_id: Any) -> Any:
    return and_(TicketRule.organization_id == organization_id, TicketRule.discarded_at.is_(None))


def reportable_organizations(
    session: Session, only: int | None = None
) -> list[ReportableOrganization]:
    """Every reportable organization (or just ``only``, when it is one), by id."""
    any_rule = exists().where(_live_rules(Organization.id))
    fixed_rule = exists().where(
        _live_rules(Organization.id), TicketRule.rule_type == FIXED_PER_PERIOD
    )
    query = (
        select(Organization.id, Organization.name, Organization.time_zone)
        .where(
            Organization.demo.is_(False),
            Organization.discarded_at.is_(None),
            or_(not_(any_rule), fixed_rule),
        )
        .order_by(Organization.id)
    )
    if only is not None:
        query = query.where(Organization.id == only)
    return [ReportableOrganization(*row) for row in session.execute(query).all()]


def collect_rows(
    session: Session, organization_id: int, day: date, time_zone: str | None
) -> list[ReportRow]:
    """One organization's report rows for its local ``day``, in the caller's transaction
    with the seed's statement timeout set for that transaction only."""
    session.execute(text(f"SET LOCAL statement_timeout = '{COLLECT_STATEMENT_TIMEOUT}'"))
    start, end = local_day_bounds(day, time_zone)
    query = (
        select(
            Employee.id,
            Employee.name,
            Employee.email,
            func.count(Evaluation.id),
            func.round(func.avg(Evaluation.score).cast(Numeric), 1),
            func.min(Evaluation.score),
        )
        .join(
            Employee,
            and_(
                Employee.id == Evaluation.employee_id,
                Employee.organization_id == Evaluation.organization_id,
            ),
        )
        .where(
            Evaluation.organization_id == organization_id,
            Evaluation.status == COMPLETED,
            Evaluation.completed_at >= start,
            Evaluation.completed_at < end,
        )
        .group_by(Employee.id, Employee.name, Employee.email)
        .order_by(Employee.name, Employee.id)
    )
    return [
        ReportRow(
            agent_id=row[0],
            agent_name=row[1],
            agent_email=row[2],
            evaluations=int(row[3]),
            average_score=_float(row[4]),
            lowest_score=_float(row[5]),
        )
        for row in session.execute(query).all()
    ]


def organization_zones(session: Session, ids: Sequence[int]) -> dict[int, str]:
    """Organization id -> time zone name, for the given ids."""
    if not ids:
        return {}
    rows = session.execute(
        select(Organization.id, Organization.time_zone).where(Organization.id.in_(list(ids)))
    ).all()
    return {row[0]: row[1] for row in rows}


def new_goodjob_rows(session: Session, since: datetime) -> dict[str, int]:
    """Replaced GoodJob class -> rows created after ``since`` (the seed's rollout assertion
    is zero; rows older than that are historical)."""
    rows = session.execute(
        select(GoodJob.job_class, func.count())
        .where(GoodJob.job_class.in_(REPLACED_JOB_CLASSES), GoodJob.created_at > since)
        .group_by(GoodJob.job_class)
    ).all()
    found = {str(row[0]): int(row[1]) for row in rows}
    return {name: found.get(name, 0) for name in REPLACED_JOB_CLASSES}
