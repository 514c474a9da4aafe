"""Reportable organizations and the native row collector, on real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from services.reports.store import collect_rows, reportable_organizations
from shared.db.models.rails_reports import TicketRule
from tests.integration.services.reports.factories import evaluated_agent, new_org


def test_reportable_organizations_are_non_demo_with_a_fixed_rule_or_none(
    session: Session,
) -> None:
    no_rules = new_org(session)
    fixed = new_org(session, rules=("fixed_per_period",))
    mixed = new_org(session, rules=("percentage", "fixed_per_period"))
    percentage_only = new_org(session, rules=("percentage",))
    demo = new_org(session, demo=True)
    discarded_rule_only = new_org(session)
    session.add(
        TicketRule(
            organization_id=discarded_rule_only.id,
            rule_type="percentage",
            discarded_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    session.flush()
    ids = {org.id for org in reportable_organizations(session)}
    assert {no_rules.id, fixed.id, mixed.id, discarded_rule_only.id} <= ids
    assert percentage_only.id not in ids and demo.id not in ids
    assert [o.id for o in reportable_organizations(session, only=fixed.id)] == [fixed.id]
    assert reportable_organizations(session, only=demo.id) == []


def test_the_collector_counts_the_local_day_of_the_organization_only(session: Session) -> None:
    tokyo = new_org(session, time_zone="Asia/Tokyo")
    other = new_org(session, time_zone="Asia/Tokyo")
    # 2026-11-30 in Tokyo is [2026-11-29T15:00Z, 2026-11-30T15:00Z)
    evaluated_agent(session, tokyo, "Ada", [90, 70], datetime(2026, 11, 29, 15, 0, tzinfo=UTC))
    evaluated_agent(session, tokyo, "Bob", [50], datetime(2026, 11, 30, 15, 0, tzinfo=UTC))
    evaluated_agent(session, other, "Eve", [10], datetime(2026, 11, 30, 1, 0, tzinfo=UTC))
    with session.begin_nested():
        rows = collect_rows(session, tokyo.id, date(2026, 11, 30), "Asia/Tokyo")
    assert [(r.agent_name, r.evaluations, r.average_score, r.lowest_score) for r in rows] == [
        ("Ada", 2, 80.0, 70.0)
    ]


def test_the_collectors_statement_timeout_holds_for_its_transaction_only(
    db_session_factory: sessionmaker[Session],
) -> None:
    with db_session_factory() as session, session.begin():
        collect_rows(session, 1, date(2026, 11, 30), "UTC")
        assert session.execute(text("SHOW statement_timeout")).scalar() == "5min"
    with db_session_factory() as session:
        assert session.execute(text("SHOW statement_timeout")).scalar() != "5min"
