"""A day of seed 001's maintenance ticks on real worker processes, with a simulated clock.

What runs:

* a fresh migrated PostgreSQL database and a fresh Redis namespace;
* ``organizations`` organizations with ``sources_per_organization`` kept Unit21 sources each,
  plus a discarded Unit21 source and a Zendesk source per organization (never synced);
* counter-cache parents with drifted counters (for the native repairs);
* the local Rails protocol server; PostHog with ``api2_counter_cache_native_repairs``
  released to this deployment's region (``eu-central-1``), so three steps run natively;
* ``workers`` worker processes building the production platform with ``bootstrap()``; the
  first generation is armed to SIGKILL itself right after a completed resumable step
  (``step.after``), so the first repair run loses at least one worker, which is replaced;
* the simulated clock: every minute of one UTC day, the ticks due then (Unit21 every ten
  minutes, the expired-evaluation sweep at :05, the counter-cache repair every three hours),
  each emitted twice (a second scheduler); every round waits until its jobs have settled;
* a concurrent holder of the advisory lock during the 06:00 counter-cache run (a second
  PostgreSQL session, released after two seconds). In the workers the contended delay is
  shortened from 300 s to :data:`CONTENDED_DELAY_SECONDS` (the clock is simulated).

What is checked: every tick job completed; every kept Unit21 source synced once per Unit21
round and the others never; 24 sweeps with their counts on the job record; eight repair
runs, each step called once per run (no step re-run after the kill or the contention), the
contended run delayed without spending an attempt; counters in parity at the end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from multiprocessing.process import BaseProcess
from typing import Any

CONTENDED_DELAY_SECONDS = 3.0
NATIVE_FLAG = "api2_counter_cache_native_repairs"
FIX = "/internal/counter_caches/fix"
SWEEP = "/internal/expired_evaluations/process"
UNIT21 = "/internal/organization_data_sources/{}/sync_unit21"


@dataclass(frozen=True)
class MaintenanceDay:
    organizations: int = 50
    sources_per_organization: int = 2
    day: date = date(2026, 12, 1)
    workers: int = 2
    threads: int = 4
    contended_hour: int = 6
    kill_a_worker: bool = True
    timeout: float = 120.0
    #: Minutes of the day simulated from 00:00 (a shorter run for the end-to-end test).
    minutes: int = 24 * 60


def due(minute_of_day: int) -> list[str]:
    """The ticks whose cron fires at this minute of the day (UTC)."""
    hour, minute = divmod(minute_of_day, 60)
    names = []
    if minute % 10 == 0:
        names.append("unit21-sync")
    if minute == 5:
        names.append("mark-expired-evaluations-failed-hourly")
    if minute == 0 and hour % 3 == 0:
        names.append("counter-cache-fix")
    return names


def worker_main(values: dict[str, Any], threads: int) -> None:
    """Serve the maintenance tier until SIGTERM, with short retries and contended delay."""
    import dataclasses

    from services.app.bootstrap import bootstrap
    from services.maintenance import counter_caches
    from shared.config import load_settings
    from tiers.policies import RetryPolicy
    from tiers.worker import serve

    counter_caches.CONTENDED_DELAY_SECONDS = CONTENDED_DELAY_SECONDS
    platform = bootstrap(load_settings(**values), component="maintenance-day")
    by_name = platform.registry.by_name()
    for name, family in list(by_name.items()):
        if family.fixed_tier == "maintenance":
            by_name[name] = dataclasses.replace(
                family, retry=RetryPolicy(max_attempts=3, base_seconds=0.3)
            )
    try:
        serve(
            platform.broker,
            platform.registry.queues_of_tier("maintenance"),
            threads=threads,
            poll_ms=50,
            drain_seconds=5,
        )
    finally:
        platform.close()


def start_worker(values: dict[str, Any], threads: int, fault: str | None = None) -> BaseProcess:
    import multiprocessing
    import os

    from tiers.faults import FAULT_ENV

    process = multiprocessing.get_context("spawn").Process(
        target=worker_main, args=(values, threads), daemon=True
    )
    saved = os.environ.get(FAULT_ENV)
    if fault:
        os.environ[FAULT_ENV] = fault
    try:
        process.start()
    finally:
        if saved is None:
            os.environ.pop(FAULT_ENV, None)
        else:
            os.environ[FAULT_ENV] = saved
    return process


def _seed(sessions: Any, config: MaintenanceDay) -> tuple[list[int], list[int]]:
    """Kept Unit21 source ids, and the ids that must never be synced."""
    from shared.db.models.rails import DataSource, Organization, OrganizationDataSource
    from shared.db.models.rails_routine import Group, GroupEmployee, Sheet, SheetRow

    kept: list[int] = []
    never: list[int] = []
    with sessions() as session:
        unit21, zendesk = (
            DataSource(key="unit21", name="Unit21"),
            DataSource(key="zendesk", name="Z"),
        )
        session.add_all([unit21, zendesk])
        session.flush()
        now = datetime.now(UTC)
        for index in range(config.organizations):
            org = Organization(name=f"Tenant {index}")
            session.add(org)
            session.flush()
            rows = [
                OrganizationDataSource(organization_id=org.id, data_source_id=unit21.id)
                for _ in range(config.sources_per_organization)
            ]
            discarded = OrganizationDataSource(
                organization_id=org.id, data_source_id=unit21.id, discarded_at=now
            )
            other = OrganizationDataSource(organization_id=org.id, data_source_id=zendesk.id)
            session.add_all([*rows, discarded, other])
            session.flush()
            kept += [row.id for row in rows]
            never += [discarded.id, other.id]
            group, sheet = Group(group_employees_count=99), Sheet(sheet_rows_count=0)
            session.add_all([group, sheet])
            session.flush()
            session.add_all([GroupEmployee(group_id=group.id) for _ in range(index % 4)])
            session.add_all([SheetRow(sheet_id=sheet.id) for _ in range(index % 3)])
        session.commit()
    return kept, never


def run_day(config: MaintenanceDay, redis_url: str) -> dict[str, Any]:
    from shared.db.engine import make_engine, make_session_factory
    from shared.db.migrate import upgrade
    from testkit.fakes.posthog_server import PostHogServer, region_flag
    from testkit.fakes.rails_server import RailsServer
    from testkit.reports_scenario import _drop_namespace
    from testkit.scenario_database import drop_database, new_database, server_database_url

    server = server_database_url()
    database_url = new_database(server, "speedtier_maintenance_day_")
    namespace = f"maintenance-day-{uuid.uuid4().hex[:8]}"
    rails = RailsServer()
    posthog = PostHogServer(project_api_key="phc_day", personal_api_key="phx_day")
    posthog.set_flags(region_flag(NATIVE_FLAG, ["eu-central-1"]))
    engine = make_engine(database_url)
    try:
        upgrade(database_url)
        kept, never = _seed(make_session_factory(engine), config)
        with rails, posthog:
            rails.results[SWEEP] = {"snapshots": {"candidates": 3, "failures": 0}}
            values = {
                "redis_url": redis_url,
                "database_url": database_url,
                "redis_namespace": namespace,
                "environment": "test",
                "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
                "metrics_port": 0,
                "heartbeat_timeout_seconds": 2.0,
                "rails_internal_url": rails.base_url,
                "rails_internal_token": rails.token,
                "rails_timeout_seconds": 5.0,
                "posthog_host": posthog.base_url,
                "posthog_project_api_key": "phc_day",
                "posthog_personal_api_key": "phx_day",
                "region": "eu-central-1",
            }
            return _drive(config, values, database_url, kept, never, rails)
    finally:
        engine.dispose()
        _drop_namespace(redis_url, namespace)
        drop_database(server, database_url)


def _hold_lock(database_url: str, seconds: float, held: threading.Event) -> None:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("SELECT pg_advisory_lock(hashtextextended('fix_counter_caches', 0))")
        held.set()
        time.sleep(seconds)


def _drive(
    config: MaintenanceDay,
    values: dict[str, Any],
    database_url: str,
    kept: list[int],
    never: list[int],
    rails: Any,
) -> dict[str, Any]:
    from router.requests import JobRequest
    from services.app.bootstrap import bootstrap
    from services.maintenance.store import counters_out_of_parity
    from shared.config import load_settings
    from shared.db.engine import session_scope
    from testkit.reports_workers import stop

    platform = bootstrap(load_settings(**values), component="maintenance-day-driver")
    jobs = platform.broker.jobs
    # Every first-generation worker is armed, so whichever runs the first repair step dies
    # right after marking it (and so may the one its redelivery lands on); replacements are not.
    fault = "step.after" if config.kill_a_worker else None
    workers = [start_worker(values, config.threads, fault) for _ in range(config.workers)]
    _REPLACED.clear()
    contended: dict[str, str] = {}
    tick_states: Counter[str] = Counter()
    emitted = 0
    started = time.monotonic()
    try:
        unit21_rounds = 0
        for minute in range(config.minutes):
            names = due(minute)
            if not names:
                continue
            at = datetime.combine(config.day, datetime.min.time(), UTC) + timedelta(minutes=minute)
            holder = None
            if "counter-cache-fix" in names and at.hour == config.contended_hour:
                held = threading.Event()
                holder = threading.Thread(target=_hold_lock, args=(database_url, 2.0, held))
                holder.start()
                held.wait(10)
            tick_ids = []
            for name in names:
                tick = platform.tick(name)
                slot = tick.slot(at)
                for _emission in range(2):
                    platform.router.enqueue(JobRequest(tick.kind, None, {"slot": slot}))
                    emitted += 1
                tick_ids.append(tick.job_id(slot))
            if "unit21-sync" in names:
                unit21_rounds += 1
            _replace_dead(workers, values, config.threads)
            _wait(
                lambda ids=tick_ids: all(_state(jobs, j) in ("completed", "failed") for j in ids),
                config.timeout,
                workers,
                values,
                config.threads,
            )
            tick_states.update(_state(jobs, j) or "none" for j in tick_ids)
            target = unit21_rounds * len(kept)
            _wait(
                lambda target=target: (
                    _unit21_calls(rails) >= target
                    and all(
                        _state(jobs, f"unit21-sync-source-{ods}") == "completed" for ods in kept
                    )
                ),
                config.timeout,
                workers,
                values,
                config.threads,
            )
            if "counter-cache-fix" in names:
                _wait(
                    lambda: _state(jobs, "counter-cache-fix") == "completed",
                    config.timeout,
                    workers,
                    values,
                    config.threads,
                )
                if holder is not None:
                    record = jobs.record("counter-cache-fix") or {}
                    contended = {k: record.get(k, "") for k in ("last_delay", "failures")}
                    holder.join()
        wall = time.monotonic() - started
        with session_scope(platform.sessions) as session:
            parity = counters_out_of_parity(session)
    finally:
        stop(*workers)
        platform.close()
    calls = Counter(request.path for request in rails.requests)
    fix_steps = Counter(request.body["step"] for request in rails.calls(FIX))
    problems = []
    if set(tick_states) != {"completed"}:
        problems.append(f"tick states: {dict(tick_states)}")
    per_source = {ods: calls[UNIT21.format(ods)] for ods in kept}
    if min(per_source.values()) < unit21_rounds:
        problems.append(f"Unit21 syncs per source: {Counter(per_source.values())}")
    if any(calls[UNIT21.format(ods)] for ods in never):
        problems.append("a discarded or non-Unit21 source was synced")
    expected = Counter(name for minute in range(config.minutes) for name in due(minute))
    if calls[SWEEP] != expected["mark-expired-evaluations-failed-hourly"]:
        problems.append(f"sweeps: {calls[SWEEP]}")
    if set(fix_steps.values()) != {expected["counter-cache-fix"]} or len(fix_steps) != 4:
        problems.append(f"counter-cache steps called on Rails: {dict(fix_steps)}")
    if not contended.get("last_delay", "").startswith("fix_counter_caches lock held"):
        problems.append(f"the contended run was not delayed: {contended}")
    if any(parity.values()):
        problems.append(f"counters out of parity: {parity}")
    return {
        "config": {**asdict(config), "day": config.day.isoformat()},
        "unit21_sources": len(kept),
        "unit21_rounds": unit21_rounds,
        "tick_emissions": emitted,
        "rails_calls": len(rails.requests),
        "wall_seconds": round(wall, 2),
        "simulated_day_per_wall_second": round(86_400 / wall, 1),
        "unit21_syncs": sum(per_source.values()),
        # a SIGKILLed worker's in-flight syncs run again (at-least-once; the sweep is idempotent)
        "unit21_syncs_redelivered": sum(per_source.values()) - unit21_rounds * len(kept),
        "unit21_syncs_per_second": round(sum(per_source.values()) / wall, 1),
        "sweeps": calls[SWEEP],
        "rails_fix_calls_by_step": dict(fix_steps),
        "contended_run": contended,
        "workers_replaced": sum(_REPLACED),
        "parity": parity,
        "problems": problems,
    }


def _unit21_calls(rails: Any) -> int:
    return sum(1 for r in rails.requests if r.path.endswith("/sync_unit21"))


def _state(jobs: Any, job_id: str) -> str | None:
    record = jobs.record(job_id)
    return record["state"] if record else None


_REPLACED: list[int] = []


def _replace_dead(workers: list[BaseProcess], values: dict[str, Any], threads: int) -> int:
    """Start a fresh worker for each one that died (counted in ``_REPLACED``)."""
    replaced = 0
    for index, process in enumerate(workers):
        if not process.is_alive():
            process.join(timeout=5)
            workers[index] = start_worker(values, threads)
            replaced += 1
    _REPLACED.append(replaced)
    return replaced


def _wait(
    predicate: Any,
    timeout: float,
    workers: list[BaseProcess],
    values: dict[str, Any],
    threads: int,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        _replace_dead(workers, values, threads)
        time.sleep(0.02)
    raise TimeoutError(f"not settled within {timeout} s")
