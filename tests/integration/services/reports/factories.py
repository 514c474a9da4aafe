"""Rows and workers for the report tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count

from sqlalchemy.orm import Session

from services.app.bootstrap import Platform
from shared.db.models.rails import Organization
from shared.db.models.rails_reports import Employee, Evaluation, TicketRule
from tests.platform_harness import serving
from tiers.table import TIERS

_ids = count(1)


def new_org(
    session: Session, *, time_zone: str = "UTC", demo: bool = False, rules: tuple[str, ...] = ()
) -> Organization:
    org = Organization(name=f"Org {next(_ids)}", time_zone=time_zone, demo=demo)
    session.add(org)
    session.flush()
    for rule_type in rules:
        session.add(TicketRule(organization_id=org.id, rule_type=rule_type))
    session.flush()
    return org


def evaluated_agent(
    session: Session, org: Organization, name: str, scores: list[float], at: datetime
) -> Employee:
    agent = Employee(organization_id=org.id, name=name, email=f"{name.lower()}@x.test")
    session.add(agent)
    session.flush()
    for score in scores:
        session.add(
            Evaluation(
                organization_id=org.id,
                employee_id=agent.id,
                status="completed",
                score=score,
                completed_at=at.astimezone(UTC),
            )
        )
    session.flush()
    return agent


@contextlib.contextmanager
def running_workers(
    platform: Platform, *, threads: int = 4, only: tuple[str, ...] = ()
) -> Iterator[None]:
    """A real Dramatiq worker in a thread of this process, over every queue (or only the
    queues of the families named in ``only``)."""
    queues = [
        q
        for tier in TIERS
        for q in platform.registry.queues_of_tier(tier)
        if not only or q.rsplit(".", 1)[0] in only
    ]
    with serving(platform.broker, queues, threads=threads):
        yield
