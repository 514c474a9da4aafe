"""The seed's validation and rollout assertions answerable from this side
(``speedtier reports check``).

| check | passes when |
| --- | --- |
| pause flag | ``pause_api2_daily_agent_evaluation_reports`` is off |
| ticks registered | both ticks exist at 04:00 and 20:00 UTC |
| uncertain Slack/email claims | no unresolved report delivery claim (seed: resolve by hand) |
| reportable organizations | at least one organization is reportable (else the ticks do nothing) |
| no failed report job | no ``daily-agent-eval-report-*`` job record is ``failed`` (an uncertain
  Slack post or a permanent refusal: see its ``last_error``, then ``speedtier reports retry``) |
| shadow parity | no shadow run of the native collector diverged from Rails' rows in 24 hours |
| no new GoodJob rows | ``SendDailyAgentEvaluationReportJob`` and ``...ForOrganizationJob`` have no
  ``good_jobs`` row created after ``since`` (default: 12 hours ago, GoodJob's cleanup window) |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from router.context import ServiceContext
from services.rails.delivery_claims import unresolved
from services.reports.families import PAUSE_FLAG, REPORT_JOB_PREFIX, TIER
from services.reports.shadow import SHADOW_WINDOW, shadow_runs
from services.reports.store import new_goodjob_rows, reportable_organizations
from services.reports.ticks import CADENCES
from shared.db.engine import session_scope
from tiers.job_store import as_text

_REPORT_KEYS = ("slack/daily-agent-eval-report-", "email/daily-agent-eval-report-", "combined/")


@dataclass(frozen=True)
class Check:
    passed: bool
    summary: str
    details: tuple[str, ...] = ()


#: GoodJob's cleanup window: rows older than this are historical.
BAKE_WINDOW = timedelta(hours=12)


def run_checks(platform: ServiceContext, since: datetime | None = None) -> list[Check]:
    paused = platform.flags.is_enabled(PAUSE_FLAG)
    checks = [Check(not paused, f"{PAUSE_FLAG} is {'on' if paused else 'off'} (expected off)")]
    wrong = []
    for name, cron in CADENCES.items():
        try:
            tick = platform.tick(name)
        except KeyError:
            wrong.append(f"{name} not registered")
            continue
        if tick.cron != cron:
            wrong.append(f"{name} runs at {tick.cron!r}, expected {cron!r}")
    checks.append(Check(not wrong, "report ticks at 04:00 and 20:00 UTC", tuple(wrong)))
    claims = [
        claim
        for claim in unresolved(platform.sessions)
        if claim.delivery_key.startswith(_REPORT_KEYS)
    ]
    checks.append(
        Check(
            not claims,
            f"report deliveries with an uncertain outcome: {len(claims)}",
            tuple(f"{c.delivery_key} claimed {c.created_at:%FT%TZ}" for c in claims),
        )
    )
    failed = failed_report_jobs(platform)
    checks.append(
        Check(
            not failed,
            f"failed report jobs: {len(failed)}",
            tuple(f"{job_id}: {error[:200]}" for job_id, error in failed),
        )
    )
    with session_scope(platform.sessions) as session:
        count = len(reportable_organizations(session))
        since = since or datetime.now(UTC) - BAKE_WINDOW
        goodjobs = new_goodjob_rows(session, since)
    checks.append(Check(count > 0, f"reportable organizations: {count}"))
    checks.append(shadow_parity(platform))
    checks.append(
        Check(
            not any(goodjobs.values()),
            f"new normal-path GoodJob rows since {since:%FT%TZ}: {sum(goodjobs.values())}",
            tuple(f"{name}: {rows}" for name, rows in goodjobs.items() if rows),
        )
    )
    return checks


def shadow_parity(platform: ServiceContext) -> Check:
    """No shadow run of the native collector diverged from Rails' rows in the bake window."""
    jobs = platform.brokers.of_tier(TIER).jobs
    runs = shadow_runs(jobs, REPORT_JOB_PREFIX, datetime.now(UTC) - SHADOW_WINDOW)
    diverged = [run for run in runs if not run.matched]
    return Check(
        not diverged,
        f"native collector shadow runs in 24 h: {len(runs)}, diverged: {len(diverged)}",
        tuple(
            f"{run.job_id}: {run.record.get('error') or '; '.join(run.record['differences'][:3])}"
            for run in diverged
        ),
    )


def failed_report_jobs(platform: ServiceContext, limit: int = 50) -> list[tuple[str, str]]:
    """``(job id, last error)`` of report jobs whose record says ``failed`` (kept for the
    family's retention)."""
    jobs = platform.brokers.of_tier(TIER).jobs
    prefix = jobs.record_key(REPORT_JOB_PREFIX)
    failed: list[tuple[str, str]] = []
    for key in jobs.client.scan_iter(match=f"{prefix}*", count=500):
        job_id = as_text(key)[len(prefix) - len(REPORT_JOB_PREFIX) :]
        record = jobs.record(job_id) or {}
        if record.get("state") == "failed":
            failed.append((job_id, record.get("last_error", "")))
            if len(failed) >= limit:
                break
    return sorted(failed)
