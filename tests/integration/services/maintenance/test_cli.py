"""``speedtier claims`` (the seed's manual resolution of uncertain delivery claims) and
``speedtier maintenance check|fix-counter-caches``, run as the command line runs them."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.app.cli import main
from services.maintenance.counter_caches import STEPS
from services.maintenance.families import (
    COUNTER_CACHE_FIX_JOB_ID,
    PAUSE_UNIT21,
    counter_cache_request,
)
from services.maintenance.store import NATIVE_COUNTERS
from services.maintenance.ticks import EXPIRED_EVALUATIONS_TICK
from services.rails import delivery_claims
from shared.db.base import utcnow
from testkit.fakes.rails_server import RailsServer
from tests.integration.services.maintenance.factories import (
    RAILS_TOKEN,
    clear_unit21_sources,
    organization,
    organization_data_source,
    running_workers,
)
from tests.platform_harness import wait_until
from tiers.job_state import JobState


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    database_url: str,
    namespace: str,
    rails: RailsServer,
) -> CliRunner:
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "SPEEDTIER_FLAG_CACHE_SECONDS": "0",
        "RAILS_INTERNAL_URL": rails.base_url,
        "RAILS_INTERNAL_TOKEN": RAILS_TOKEN,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SPEEDTIER_FLAGS", raising=False)
    return CliRunner()


def test_claims_list_mark_delivered_and_release(cli: CliRunner, platform: Platform) -> None:
    landed, lost = (f"slack/cli-{uuid.uuid4().hex}/{n}" for n in (1, 2))
    for key in (landed, lost):
        assert delivery_claims.claim(platform.sessions, key)
    listed = cli.invoke(main, ["claims", "list"])
    assert listed.exit_code == 0 and landed in listed.output and lost in listed.output
    marked = cli.invoke(main, ["claims", "mark-delivered", landed])
    assert marked.exit_code == 0, marked.output
    released = cli.invoke(main, ["claims", "release", lost])
    assert released.exit_code == 0, released.output
    assert delivery_claims.find(platform.sessions, lost) is None
    claim = delivery_claims.find(platform.sessions, landed)
    assert claim is not None and claim.resolved
    # a delivered claim is never released, an unknown key is a clear error
    refused = cli.invoke(main, ["claims", "release", landed])
    assert refused.exit_code == 1 and "never released" in refused.output
    unknown = cli.invoke(main, ["claims", "mark-delivered", "no-such-key"])
    assert unknown.exit_code == 1 and "no claim" in unknown.output
    assert landed not in cli.invoke(main, ["claims", "list"]).output


def test_maintenance_check_prints_pass_or_fail_for_each(cli: CliRunner, platform: Platform) -> None:
    platform.flags.set(PAUSE_UNIT21, True)
    try:
        result = cli.invoke(main, ["maintenance", "check"])
    finally:
        platform.flags.set(PAUSE_UNIT21, False)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "[pass] schedulers on the seed's cadences: 3/3" in lines
    assert f"[fail] {PAUSE_UNIT21} is on (expected off)" in lines
    assert any(line.startswith("[pass] RAILS_INTERNAL_URL is http://") for line in lines)
    assert any("counter-cache-fix: no record" in line for line in lines)


def test_fix_counter_caches_enqueues_the_deterministic_job(
    cli: CliRunner, platform: Platform
) -> None:
    first = cli.invoke(main, ["maintenance", "fix-counter-caches"])
    second = cli.invoke(main, ["maintenance", "fix-counter-caches"])
    assert first.exit_code == 0 and "added" in first.output
    assert f"{COUNTER_CACHE_FIX_JOB_ID}: deduplicated" in second.output


def test_the_repair_check_fails_while_native_repairs_still_call_rails(
    cli: CliRunner, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given native repairs on, and a completed run whose four unported steps called #fix
    monkeypatch.setenv("SPEEDTIER_FLAGS", '{"api2_counter_cache_native_repairs": true}')
    platform.router.enqueue(counter_cache_request())
    state = JobState(platform.broker.jobs, COUNTER_CACHE_FIX_JOB_ID)
    state.set(engine="native")
    for step in STEPS:
        engine = "native" if step in NATIVE_COUNTERS else "rails"
        state.complete_step(step, {"engine": engine})
    jobs = platform.broker.jobs
    jobs.client.hset(jobs.record_key(COUNTER_CACHE_FIX_JOB_ID), "state", "completed")
    # When the rollout is checked
    result = cli.invoke(main, ["maintenance", "check"])
    # Then the repair check fails and names the steps Rails still runs
    line = next(x for x in result.output.splitlines() if "counter-cache-fix:" in x)
    assert line.startswith("[fail]") and "4/7 steps still call #fix" in line, result.output
    rails_steps = [step for step in STEPS if step not in NATIVE_COUNTERS]
    assert f"#fix: {', '.join(rails_steps)}" in result.output
    assert result.exit_code == 1


def test_jobs_show_prints_the_durable_state(cli: CliRunner, platform: Platform) -> None:
    platform.router.enqueue(counter_cache_request())
    state = JobState(platform.broker.jobs, COUNTER_CACHE_FIX_JOB_ID)
    state.set(engine="rails")
    state.complete_step("assignment_queue_memberships", {"fixed": 2})
    shown = cli.invoke(main, ["jobs", "show", COUNTER_CACHE_FIX_JOB_ID])
    assert shown.exit_code == 0, shown.output
    assert 'data:engine "rails"' in shown.output
    assert "step:assignment_queue_memberships" in shown.output


def test_maintenance_check_passes_after_every_family_ran(
    cli: CliRunner, platform: Platform, rails: RailsServer
) -> None:
    # Given one Unit21 source, no claim left open by earlier tests
    clear_unit21_sources(platform.sessions)
    with platform.sessions() as session:
        org = organization(session)
        organization_data_source(session, org, "unit21")
        session.execute(text("DELETE FROM outbound_delivery_claims WHERE delivered_at IS NULL"))
        session.commit()
    # When this hour's sweep, a Unit21 round and a counter-cache run have completed
    sweep = platform.tick(EXPIRED_EVALUATIONS_TICK)
    now = utcnow()
    fire = now.replace(minute=5, second=0, microsecond=0)
    if fire > now:
        fire -= timedelta(hours=1)
    platform.router.enqueue(JobRequest(sweep.kind, None, {"slot": sweep.slot(fire)}))
    platform.tick("unit21-sync").run("manual")
    platform.router.enqueue(counter_cache_request())
    jobs = platform.broker.jobs
    with running_workers(platform):
        wait_until(
            lambda: all(
                (jobs.record(job_id) or {}).get("state") == "completed"
                for job_id in (sweep.job_id(sweep.slot(fire)), COUNTER_CACHE_FIX_JOB_ID)
            ),
            timeout=30,
        )
        wait_until(lambda: "[pass] Unit21" in cli.invoke(main, ["maintenance", "check"]).output)
    # Then every check passes
    result = cli.invoke(main, ["maintenance", "check"])
    assert result.exit_code == 0, result.output
    assert "[fail]" not in result.output
    assert (
        "steps that called Internal::CounterCachesController#fix: assignment_queue_memberships"
        in (result.output)
    )
