"""Each check of ``speedtier maintenance check`` fails when the seed's assertion does not
hold and passes when it does (real Redis and PostgreSQL; the counter and GoodJob rows are
written in a rolled-back session)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.maintenance import checks
from services.maintenance.families import PAUSE_FLAGS, unit21_request
from services.maintenance.ticks import EXPIRED_EVALUATIONS_TICK
from services.rails import delivery_claims
from shared.db.base import utcnow
from shared.db.models import GoodJob
from shared.db.models.rails_routine import Group, GroupEmployee
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import (
    clear_unit21_sources,
    organization,
    organization_data_source,
)


def test_kill_switches_fail_while_raised(platform: Platform) -> None:
    assert all(check.passed for check in checks.kill_switches(platform))
    for flag in PAUSE_FLAGS:
        platform.flags.set(flag, True)
        try:
            verdicts = {c.summary: c.passed for c in checks.kill_switches(platform)}
        finally:
            platform.flags.set(flag, False)
        assert verdicts[f"{flag} is on (expected off)"] is False


def test_the_rails_endpoint_fails_when_unset(make_platform: MakePlatform) -> None:
    assert not checks.rails_endpoint(make_platform(rails_internal_url="")).passed
    assert checks.rails_endpoint(make_platform(rails_internal_url="http://rails:3000")).passed


def test_the_sweep_fails_until_its_last_slot_completed(platform: Platform) -> None:
    now = utcnow()
    tick = platform.tick(EXPIRED_EVALUATIONS_TICK)
    fire = now.replace(minute=5, second=0, microsecond=0)
    if fire > now:
        fire -= timedelta(hours=1)
    job_id = tick.job_id(tick.slot(fire))
    assert not checks.expired_evaluations(platform, now).passed
    platform.router.enqueue(JobRequest(tick.kind, None, {"slot": tick.slot(fire)}))
    assert not checks.expired_evaluations(platform, now).passed  # queued, not run
    jobs = platform.broker.jobs
    jobs.client.hset(jobs.record_key(job_id), "state", "completed")
    assert checks.expired_evaluations(platform, now).passed


def test_unit21_fails_for_a_source_whose_job_did_not_complete(platform: Platform) -> None:
    clear_unit21_sources(platform.sessions)
    with platform.sessions() as session:
        org = organization(session)
        ods = organization_data_source(session, org, "unit21")
        session.commit()
    try:
        with platform.sessions() as session:
            assert not checks.unit21_sync(platform, session).passed
        platform.router.enqueue(unit21_request(org, ods))
        jobs = platform.broker.jobs
        jobs.client.hset(jobs.record_key(f"unit21-sync-source-{ods}"), "state", "completed")
        with platform.sessions() as session:
            assert checks.unit21_sync(platform, session).passed
    finally:
        clear_unit21_sources(platform.sessions)


def test_counter_parity_fails_on_drift_and_on_unmeasurable_steps_with_native_on(
    session: Session,
) -> None:
    session.execute(text("TRUNCATE group_employees, groups CASCADE"))
    group = Group(group_employees_count=1)
    session.add(group)
    session.flush()
    session.add(GroupEmployee(group_id=group.id))
    session.flush()
    assert checks.counter_parity(session, native=False).passed
    native = checks.counter_parity(session, native=True)
    assert not native.passed
    assert "parity not measurable here: employees, credit_usages" in native.details[-1]

    session.add(GroupEmployee(group_id=group.id))
    session.flush()
    drifted = checks.counter_parity(session, native=False)
    assert not drifted.passed
    assert "group_employees: 1 parent(s) differ" in drifted.details


def test_unresolved_claims_fail_until_resolved(platform: Platform) -> None:
    with platform.sessions() as session:
        session.execute(text("DELETE FROM outbound_delivery_claims WHERE delivered_at IS NULL"))
        session.commit()
    assert checks.unresolved_claims(platform.sessions).passed
    key = f"slack/maintenance-check-{uuid.uuid4().hex[:8]}"
    assert delivery_claims.claim(platform.sessions, key)
    try:
        result = checks.unresolved_claims(platform.sessions)
        assert not result.passed and any(key in line for line in result.details)
    finally:
        delivery_claims.mark_delivered(platform.sessions, key)
    assert checks.unresolved_claims(platform.sessions).passed


@pytest.mark.parametrize("job_class", ["SyncJobs::SyncUnit21Job", "FixCounterCachesJob"])
def test_a_new_row_of_a_replaced_class_fails(session: Session, job_class: str) -> None:
    session.execute(text("TRUNCATE good_jobs"))
    session.add(GoodJob(job_class=job_class, created_at=utcnow() - timedelta(hours=13)))
    session.flush()
    assert checks.good_jobs(session).passed
    session.add(GoodJob(job_class=job_class, created_at=utcnow() - timedelta(hours=1)))
    session.flush()
    result = checks.good_jobs(session)
    assert not result.passed and result.details == (f"{job_class}: 1",)
