"""Seed 001's validation and rollout assertions that this side can answer, as pass/fail
checks (``speedtier maintenance check``).

| check | passes when |
| --- | --- |
| schedulers | the three ticks are registered on the seed's exact cadences |
| kill switches | each of the three ``pause_api2_*`` switches is off |
| Rails endpoint | ``RAILS_INTERNAL_URL`` is set |
| expired-evaluation sweep | the last :05 slot's job completed (its counts shown) |
| Unit21 sync | every kept Unit21 source's ``unit21-sync-source-<id>`` completed in its retention |
| counter-cache repair | the last ``counter-cache-fix`` completed, and with native repairs |
|  | on, no step called Rails' ``#fix`` (those that did are listed) |
| counter parity | every measurable counter equals its children's count; with native repairs |
|                | on, every step's counter must be measurable (the others are listed)      |
| unresolved delivery claims | no ``outbound_delivery_claims`` row without ``delivered_at`` |
| zero new GoodJob rows | no ``SyncJobs::SyncUnit21Job`` / ``FixCounterCachesJob`` row in 12 hours |
| shadow parity | no shadow run of the native counter repairs diverged in 24 hours |
| ENG-3000 bake | no ``SummarizeConversationJob`` or expired-evaluation row (cron key or class) |
|               | created in 24 hours                                                          |
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from router.context import ServiceContext
from services.maintenance import shadow, store
from services.maintenance.counter_caches import REGION_SUBJECT, STEPS
from services.maintenance.families import COUNTER_CACHE_FIX_JOB_ID, PAUSE_FLAGS
from services.maintenance.ticks import CADENCES, EXPIRED_EVALUATIONS_TICK
from services.rails import delivery_claims
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.rollouts import COUNTER_CACHE_NATIVE_REPAIRS


@dataclass(frozen=True)
class Check:
    passed: bool
    summary: str
    details: tuple[str, ...] = ()


def schedulers(platform: ServiceContext) -> Check:
    wrong = []
    for name, cron in CADENCES.items():
        try:
            registered = platform.tick(name).cron
        except KeyError:
            registered = "not registered"
        if registered != cron:
            wrong.append(f"{name}: {registered} (expected {cron})")
    return Check(
        not wrong,
        f"schedulers on the seed's cadences: {len(CADENCES) - len(wrong)}/{len(CADENCES)}",
        tuple(wrong),
    )


def kill_switches(platform: ServiceContext) -> list[Check]:
    checks = []
    for flag in PAUSE_FLAGS:
        on = platform.flags.is_enabled(flag)
        checks.append(Check(not on, f"{flag} is {'on' if on else 'off'} (expected off)"))
    return checks


def rails_endpoint(platform: ServiceContext) -> Check:
    url = platform.settings.rails_internal_url
    return Check(bool(url), f"RAILS_INTERNAL_URL {'is ' + url if url else 'is not set'}")


def _record(platform: ServiceContext, job_id: str) -> dict[str, str] | None:
    return platform.brokers.record(job_id)


def expired_evaluations(platform: ServiceContext, now: datetime) -> Check:
    fire = now.replace(minute=5, second=0, microsecond=0)
    if fire > now:
        fire -= timedelta(hours=1)
    tick = platform.tick(EXPIRED_EVALUATIONS_TICK)
    job_id = tick.job_id(tick.slot(fire))
    record = _record(platform, job_id) or {}
    state = record.get("state", "no record")
    counts = record.get("data:counts", "-")
    return Check(
        state == "completed", f"expired-evaluation sweep {job_id}: {state}, counts {counts}"
    )


def unit21_sync(platform: ServiceContext, session: Session) -> Check:
    unsynced = []
    sources = store.unit21_sources(session)
    for organization_id, ods in sources:
        record = _record(platform, f"unit21-sync-source-{ods}") or {}
        if record.get("state") != "completed":
            unsynced.append(
                f"source {ods} org {organization_id}: {record.get('state', 'no record')}"
                f" {record.get('last_error', '')}".rstrip()
            )
    return Check(
        not unsynced,
        f"Unit21 sources synced: {len(sources) - len(unsynced)}/{len(sources)}",
        tuple(unsynced),
    )


def native_repairs(platform: ServiceContext) -> bool:
    """``api2_counter_cache_native_repairs`` in this deployment's region."""
    return platform.flags.rollout(
        COUNTER_CACHE_NATIVE_REPAIRS,
        organization_id=REGION_SUBJECT,
        region=platform.settings.region,
    )


def counter_cache_repair(platform: ServiceContext) -> Check:
    native = native_repairs(platform)
    record = _record(platform, COUNTER_CACHE_FIX_JOB_ID) or {}
    state = record.get("state", "no record")
    via_rails = [
        step
        for step in STEPS
        if json.loads(record.get(f"step:{step}", "{}")).get("result", {}).get("engine") == "rails"
    ]
    region = platform.settings.region or "unset"
    details = (f"steps that called Internal::CounterCachesController#fix: {', '.join(via_rails)}",)
    # With native repairs on, the seed's assertion is zero #fix calls: a run that still
    # called Rails for any step (a step with no native repair, or a run from before the
    # flip) is a failed rollout, not a pass.
    calls_rails_while_native = native and bool(via_rails)
    verdict = (
        f"; {len(via_rails)}/{len(STEPS)} steps still call #fix" if calls_rails_while_native else ""
    )
    return Check(
        state == "completed" and not calls_rails_while_native,
        f"counter-cache-fix: {state}; {COUNTER_CACHE_NATIVE_REPAIRS} "
        f"{'on' if native else 'off'} in region {region}; engine {record.get('data:engine', '-')}"
        f"{verdict}",
        details if via_rails else (),
    )


def counter_parity(session: Session, native: bool) -> Check:
    """Every counter this side can measure equals its children's count. The seed's rollout
    asserts parity of all seven steps; a step whose counter definition is not evident from
    the mirrored schema cannot be measured here, so with native repairs on its parity is
    unproven and the check fails naming it (with them off, Rails' run owns those counters)."""
    drift = store.counters_out_of_parity(session)
    bad = [f"{step}: {count} parent(s) differ" for step, count in drift.items() if count]
    unmeasured = [step for step in STEPS if step not in drift]
    if native and unmeasured:
        bad.append(f"parity not measurable here: {', '.join(unmeasured)}")
    return Check(
        not bad,
        f"counters in parity: {len(drift) - sum(1 for c in drift.values() if c)}/{len(STEPS)}"
        f" measured, {len(unmeasured)} not measurable here",
        tuple(bad),
    )


def unresolved_claims(sessions: sessionmaker[Session]) -> Check:
    rows = delivery_claims.unresolved(sessions)
    return Check(
        not rows,
        f"unresolved outbound delivery claims: {len(rows)}",
        tuple(f"{row.delivery_key} claimed {row.created_at:%Y-%m-%dT%H:%M:%SZ}" for row in rows),
    )


def good_jobs(session: Session) -> Check:
    rows = store.new_good_jobs(session)
    return Check(
        not rows,
        f"new GoodJob rows of the replaced classes in 12 h: {sum(rows.values())}",
        tuple(f"{job_class}: {count}" for job_class, count in rows.items()),
    )


def summary_bake(session: Session) -> Check:
    """ENG-3000: 24 hours of zero new ``SummarizeConversationJob`` and expired-evaluation
    GoodJob rows (the condition for removing the pause switch, endpoint and retained jobs)."""
    rows = store.summary_bake_rows(session)
    jobs = sum(row[2] for row in rows)
    return Check(
        not rows,
        f"ENG-3000 bake: SummarizeConversationJob / expired-evaluation GoodJob rows in 24 h:"
        f" {jobs} (expected 0)",
        tuple(
            f"{job_class} (cron {cron_key or '-'}): {count}, {first} to {last}"
            for job_class, cron_key, count, first, last in rows
        ),
    )


def shadow_parity(platform: ServiceContext, now: datetime) -> Check:
    """No shadow run of the native counter repairs diverged from Rails' ``#fix`` in 24 h."""
    jobs = platform.brokers.of_tier("maintenance").jobs
    runs = shadow.shadow_runs(jobs, now - shadow.SHADOW_WINDOW)
    diverged = [run for run in runs if not run.matched]
    return Check(
        not diverged,
        f"native counter repair shadow runs in 24 h: {len(runs)}, diverged: {len(diverged)}",
        tuple(run.describe() for run in diverged),
    )


def run_checks(platform: ServiceContext) -> list[Check]:
    """Every check, in the order ``speedtier maintenance check`` prints them."""
    now = utcnow()
    checks = [schedulers(platform), *kill_switches(platform), rails_endpoint(platform)]
    checks.append(expired_evaluations(platform, now))
    with session_scope(platform.sessions) as session:
        checks.append(unit21_sync(platform, session))
        checks.append(counter_cache_repair(platform))
        checks.append(counter_parity(session, native_repairs(platform)))
        checks.append(good_jobs(session))
        checks.append(summary_bake(session))
    checks.append(unresolved_claims(platform.sessions))
    checks.append(shadow_parity(platform, now))
    return checks
