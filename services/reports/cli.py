"""``speedtier reports``: the seed's re-drive of skipped reports, and its checks.

``redrive yesterday|today`` enqueues the aggregate job with that sentinel, so each
organization's date resolves in its own zone when it runs; ``redrive YYYY-MM-DD`` uses that
date for every organization; ``--org N`` enqueues that one organization's report (the
sentinel resolved now in its zone), as one ``POST .../enqueue`` per org would.
``retry JOB_ID`` re-runs a failed report job itself (the seed's "re-drive the caller" after an
uncertain claim was resolved by hand). ``parity`` lists the shadow runs of the native row
collector (:mod:`services.reports.shadow`).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import click

from router.context import LoadContext
from router.requests import JobRequest
from services.reports.checks import run_checks
from services.reports.dates import BadReportDate, parse_day, resolve
from services.reports.families import PAUSE_FLAG, REPORT_JOB_PREFIX, TIER, report_request
from services.reports.shadow import SHADOW_WINDOW, shadow_runs
from services.reports.store import reportable_organizations
from services.reports.ticks import TODAY_TICK, YESTERDAY_TICK
from shared import audit, progress
from shared.cli_types import RECORD_ID
from shared.db.engine import session_scope
from tiers.dead_letters import DeadLetters


@click.group("reports")
def reports() -> None:
    """Daily agent evaluation reports: re-drive, check, shadow-run parity."""


@reports.command("redrive")
@click.argument("day")
@click.option("--org", "organization_id", type=RECORD_ID, default=None)
@click.pass_obj
def redrive(load: LoadContext, day: str, organization_id: int | None) -> None:
    """Re-drive the reports of DAY (yesterday, today or YYYY-MM-DD)."""
    try:
        wanted = parse_day(day)
    except BadReportDate as exc:
        raise click.BadParameter(str(exc), param_hint="DAY") from None
    platform = load()
    if platform.flags.is_enabled(PAUSE_FLAG):
        raise click.ClickException(f"{PAUSE_FLAG} is on: resume it first")
    if organization_id is None:
        tick = platform.tick(TODAY_TICK if day == "today" else YESTERDAY_TICK)
        slot = f"redrive-{day}-{int(time.time())}"
        answer = platform.router.enqueue(JobRequest(tick.kind, None, {"slot": slot}))
        audit.record(
            platform.sessions, audit.cli_operator(), "redrive", answer.job_id, answer.outcome
        )
        click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")
        return
    with session_scope(platform.sessions) as session:
        found = reportable_organizations(session, only=organization_id)
    if not found:
        raise click.ClickException(f"organization {organization_id} is not reportable")
    resolved = resolve(wanted, found[0].time_zone, datetime.now(UTC))
    answer = platform.router.enqueue(report_request(organization_id, resolved, source="admin"))
    audit.record(platform.sessions, audit.cli_operator(), "redrive", answer.job_id, answer.outcome)
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


@reports.command("retry")
@click.argument("job_id")
@click.pass_obj
def retry(load: LoadContext, job_id: str) -> None:
    """Retry a failed report job as the same job: its completed steps and its delivery keys
    are kept, so a Slack claim resolved by hand (``speedtier claims mark-delivered`` or
    ``release``) decides whether the post is skipped or sent again. A re-drive, by
    contrast, is a new job with new keys."""
    if not job_id.startswith(REPORT_JOB_PREFIX):
        raise click.BadParameter(
            f"not a report job id ({REPORT_JOB_PREFIX}...)", param_hint="JOB_ID"
        )
    platform = load()
    operator = audit.cli_operator()
    jobs = platform.brokers.of_tier(TIER).jobs
    if jobs.record(job_id) is None:
        raise click.ClickException(f"no job {job_id} (finished jobs are kept for a while only)")
    outcome = DeadLetters(jobs).retry(job_id, operator)
    audit.record_after(platform.sessions, operator, "retry", job_id, outcome)
    if outcome not in ("waiting", "parked"):
        raise click.ClickException(f"{job_id} was not retried: {outcome}")
    click.echo(f"{job_id}: {outcome}")


@reports.command("check")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"]),
    default=None,
    help="Rollout time (UTC): GoodJob rows created after it count as new (default: 12 h ago).",
)
@click.pass_obj
def check(load: LoadContext, since: datetime | None) -> None:
    """Run the seed's checks and print pass or fail for each."""
    platform = load()
    with progress.working("reports check: running the validation queries"):
        results = run_checks(platform, since.replace(tzinfo=UTC) if since else None)
    for result in results:
        click.echo(f"[{'pass' if result.passed else 'fail'}] {result.summary}")
        for line in result.details:
            click.echo(f"       {line}")
    sys.exit(0 if all(result.passed for result in results) else 1)


@reports.command("parity")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"]),
    default=None,
    help="Start of the bake window (UTC; default: 24 h ago).",
)
@click.option("--org", "organization_id", type=RECORD_ID, default=None)
@click.pass_obj
def parity(load: LoadContext, since: datetime | None, organization_id: int | None) -> None:
    """Shadow runs of the native row collector beside Rails' (flag
    api2_daily_agent_evaluation_report_collect_shadow): each run and its differences. Exits
    1 while the window holds a divergence, or no run at all (nothing was measured)."""
    platform = load()
    start = since.replace(tzinfo=UTC) if since else datetime.now(UTC) - SHADOW_WINDOW
    jobs = platform.brokers.of_tier(TIER).jobs
    runs = shadow_runs(jobs, REPORT_JOB_PREFIX, start, organization_id)
    for run in runs:
        record = run.record
        verdict = "match" if run.matched else "DIVERGED"
        click.echo(
            f"{run.job_id} {record['ran_at']} {verdict}: rails {record.get('control_rows')}"
            f" rows, native {record.get('candidate_rows', '-')} rows"
        )
        if record.get("error"):
            click.echo(f"       native raised: {record['error']}")
        for line in record.get("differences", []):
            click.echo(f"       {line}")
    diverged = sum(1 for run in runs if not run.matched)
    click.echo(f"shadow runs since {start:%FT%TZ}: {len(runs)}, diverged: {diverged}")
    sys.exit(0 if runs and not diverged else 1)


def register(main: click.Group) -> None:
    """Add ``speedtier reports``."""
    main.add_command(reports)
