"""The counter-cache repair: the seven steps in the seed's order through Rails, the advisory
lock held by a second connection (delayed 5 minutes, attempt not spent), native repairs
under api2_counter_cache_native_repairs, the enqueue route, and a worker killed between two
steps whose retry runs only what remains."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.maintenance.counter_caches import FIX_PATH, STEPS
from services.maintenance.families import COUNTER_CACHE_FIX_JOB_ID, PAUSE_COUNTER_CACHES
from shared.db.models.rails_routine import Group, GroupEmployee, Sheet, SheetRow
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.maintenance.factories import (
    FAST_RETRIES,
    RAILS_TOKEN,
    running_workers,
    start_platform_worker,
)
from tests.platform_harness import wait_until

ROUTE = "/internal/counter_caches/enqueue"
JOB = COUNTER_CACHE_FIX_JOB_ID


def _record(platform: Platform) -> dict[str, str]:
    return platform.broker.jobs.record(JOB) or {}


def _enqueue(platform: Platform) -> None:
    platform.router.enqueue(JobRequest("fix_counter_caches", None, {}))


def _steps_called(rails: RailsServer) -> list[str]:
    return [call.body["step"] for call in rails.calls(FIX_PATH)]


@pytest.fixture
def lock_holder(database_url: str) -> Iterator[psycopg.Connection[object]]:
    """A second session holding the shared advisory lock (Rails' FixCounterCachesJob)."""
    connection = psycopg.connect(database_url, autocommit=True)
    connection.execute("SELECT pg_advisory_lock(hashtextextended('fix_counter_caches', 0))")
    try:
        yield connection
    finally:
        connection.close()


def test_the_seven_steps_run_in_the_seed_order_through_rails(
    platform: Platform, rails: RailsServer
) -> None:
    _enqueue(platform)
    with running_workers(platform):
        wait_until(lambda: _record(platform).get("state") == "completed", timeout=30)
    assert _steps_called(rails) == list(STEPS)
    record = _record(platform)
    assert record["data:engine"] == '"rails"'
    assert all(f"step:{step}" in record for step in STEPS)


def test_a_held_lock_delays_five_minutes_without_spending_an_attempt(
    platform: Platform, rails: RailsServer, lock_holder: psycopg.Connection[object]
) -> None:
    _enqueue(platform)
    before = time.time()
    with running_workers(platform):
        wait_until(lambda: _record(platform).get("last_delay", "") != "")
    record = _record(platform)
    assert record["state"] == "delayed" and record["failures"] == "0"
    assert "fix_counter_caches lock held" in record["last_delay"]
    until = float(record["last_delay"].rsplit("until ", 1)[1])
    assert until - before >= 299
    assert rails.calls(FIX_PATH) == []


def test_a_failed_step_is_retried_and_completed_steps_are_not_rerun(
    platform: Platform, rails: RailsServer
) -> None:
    rails.reject(FIX_PATH, 500, "ActiveRecord::QueryCanceled", retryable=True)
    rails.reply(FIX_PATH, 200, {"step": "assignment_queue_memberships", "fixed": 2})
    rails.reject(FIX_PATH, 500, "ActiveRecord::QueryCanceled", retryable=True)  # 2nd step
    _enqueue(platform)
    with running_workers(platform):
        wait_until(lambda: _record(platform).get("state") == "completed", timeout=30)
    called = _steps_called(rails)
    # attempt 1: step 1 fails; attempt 2: step 1 ok, step 2 fails; attempt 3: steps 2..7
    assert called == [STEPS[0], STEPS[0], STEPS[1], *STEPS[1:]]
    assert _record(platform)["failures"] == "2"


def test_native_repairs_fix_the_evident_counters_and_call_rails_for_the_rest(
    make_platform: MakePlatform, rails: RailsServer
) -> None:
    platform = make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        retries=FAST_RETRIES,
        flag_overrides={"api2_counter_cache_native_repairs": True},
        region="eu-central-1",
    )
    with platform.sessions() as session:
        group = Group(group_employees_count=5)
        sheet = Sheet(sheet_rows_count=0)
        session.add_all([group, sheet])
        session.flush()
        session.add_all([GroupEmployee(group_id=group.id), GroupEmployee(group_id=group.id)])
        session.add_all([SheetRow(sheet_id=sheet.id) for _ in range(3)])
        session.commit()
        group_id, sheet_id = group.id, sheet.id
    try:
        _enqueue(platform)
        with running_workers(platform):
            wait_until(lambda: _record(platform).get("state") == "completed", timeout=30)
        assert _steps_called(rails) == [
            "employees",
            "credit_usages",
            "conversations",
            "evaluation_sampling_rule_counters",
        ]
        with platform.sessions() as session:
            assert session.get(Group, group_id).group_employees_count == 2  # type: ignore[union-attr]
            assert session.get(Sheet, sheet_id).sheet_rows_count == 3  # type: ignore[union-attr]
        assert '"engine": "native"' in _record(platform)["step:sheet_rows"]
    finally:
        with platform.sessions() as session:
            session.execute(
                text("DELETE FROM group_employees WHERE group_id = :g"), {"g": group_id}
            )
            session.execute(text("DELETE FROM groups WHERE id = :g"), {"g": group_id})
            session.execute(text("DELETE FROM sheet_rows WHERE sheet_id = :s"), {"s": sheet_id})
            session.execute(text("DELETE FROM sheets WHERE id = :s"), {"s": sheet_id})
            session.commit()


def test_the_enqueue_route_merge_into_calls(client: FlaskClient) -> None:
    request = {"requests": [{"kind": "fix_counter_caches", "organization_id": None}]}
    assert client.post(ROUTE, json=request).status_code == 401
    assert client.post(ROUTE, json={"requests": []}, headers=AUTH).status_code == 400
    bad = {"requests": [{"kind": "fix_counter_caches", "organization_id": 3}]}
    assert client.post(ROUTE, json=bad, headers=AUTH).status_code == 400
    first = client.post(ROUTE, json=request, headers=AUTH)
    second = client.post(ROUTE, json=request, headers=AUTH)
    assert first.status_code == second.status_code == 202
    assert first.get_json()["jobs"][0] == {
        "job_id": JOB,
        "outcome": "added",
        "queue": "counter_cache_fix.maintenance",
        "kind": "fix_counter_caches",
    }
    assert second.get_json()["jobs"][0]["outcome"] == "deduplicated"


def test_the_switch_skips_the_repair(platform: Platform, rails: RailsServer) -> None:
    _enqueue(platform)
    platform.flags.set(PAUSE_COUNTER_CACHES, True)
    try:
        with running_workers(platform):
            wait_until(lambda: _record(platform).get("state") == "skipped")
    finally:
        platform.flags.set(PAUSE_COUNTER_CACHES, False)
    assert rails.calls(FIX_PATH) == []


def test_a_worker_killed_between_two_steps_resumes_after_the_completed_step(
    platform: Platform, rails: RailsServer, redis_url: str, database_url: str, namespace: str
) -> None:
    settings = {
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": namespace,
        "environment": "test",
        "rails_internal_url": rails.base_url,
        "rails_internal_token": RAILS_TOKEN,
        "heartbeat_timeout_seconds": 2.0,
        "group_lease_seconds": 2.0,
    }
    _enqueue(platform)
    doomed = start_platform_worker(settings, fault="step.after")
    doomed.join(timeout=60)
    assert doomed.exitcode == -signal.SIGKILL  # killed right after step 1 was marked
    assert _steps_called(rails) == [STEPS[0]]
    assert f"step:{STEPS[0]}" in _record(platform)
    survivor = start_platform_worker(settings)
    try:
        wait_until(lambda: _record(platform).get("state") == "completed", timeout=90)
    finally:
        if survivor.pid is not None:
            os.kill(survivor.pid, signal.SIGTERM)
        survivor.join(timeout=30)
    # the redelivery ran only the six remaining steps, each once
    assert _steps_called(rails) == list(STEPS)


def test_no_transaction_is_held_open_across_the_rails_calls(
    platform: Platform, rails: RailsServer, database_url: str
) -> None:
    # Given a Rails step that takes a while to answer
    rails.fail(FIX_PATH, "slow", delay=1.5)
    seen: list[tuple[str, str]] = []
    _enqueue(platform)
    with psycopg.connect(database_url, autocommit=True) as observer, running_workers(platform):
        # While the call is in flight, the lock's holder is idle, not idle in transaction
        wait_until(lambda: len(rails.calls(FIX_PATH)) == 1)
        rows = observer.execute(
            "SELECT a.state, coalesce(l.locktype, '') FROM pg_stat_activity a"
            " LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted"
            " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
        ).fetchall()
        seen.extend((str(state), str(lock)) for state, lock in rows)
        wait_until(lambda: _record(platform).get("state") == "completed", timeout=30)
    assert ("idle", "advisory") in seen
    assert not [state for state, _lock in seen if state.startswith("idle in transaction")]
