"""``speedtier maintenance``: the seed's checks (:mod:`services.maintenance.checks`) printed
pass or fail, and the counter-cache re-drive (the seed's ``FixCounterCachesJob.perform_later``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from router.context import LoadContext
from services.maintenance import shadow
from services.maintenance.checks import run_checks
from services.maintenance.families import PAUSE_COUNTER_CACHES, counter_cache_request
from shared import progress


@click.group("maintenance")
def maintenance() -> None:
    """Routine maintenance families (seed 001): check and re-drive."""


@maintenance.command("check")
@click.pass_obj
def check(load: LoadContext) -> None:
    """Run the seed's validation and rollout assertions; exit 1 when any fails."""
    platform = load()
    with progress.working("maintenance check: running the validation queries"):
        checks = run_checks(platform)
    for result in checks:
        click.echo(f"[{'pass' if result.passed else 'fail'}] {result.summary}")
        for line in result.details:
            click.echo(f"       {line}")
    sys.exit(0 if all(result.passed for result in checks) else 1)


@maintenance.command("fix-counter-caches")
@click.pass_obj
def fix_counter_caches(load: LoadContext) -> None:
    """Enqueue counter-cache-fix now (a contended run waits on the shared lock)."""
    platform = load()
    if platform.flags.is_enabled(PAUSE_COUNTER_CACHES):
        raise click.ClickException(f"{PAUSE_COUNTER_CACHES} is on: resume it first")
    answer = platform.router.enqueue(counter_cache_request())
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


@maintenance.command("parity")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"]),
    default=None,
    help="Start of the bake window (UTC; default: 24 h ago).",
)
@click.pass_obj
def parity(load: LoadContext, since: datetime | None) -> None:
    """Shadow runs of the native counter repairs around Rails' #fix (flag
    api2_counter_cache_native_repairs_shadow): each step measured, and whether it matched.
    Exits 1 while the window holds a divergence, or no run at all (nothing was measured)."""
    platform = load()
    start = since.replace(tzinfo=UTC) if since else datetime.now(UTC) - shadow.SHADOW_WINDOW
    runs = shadow.shadow_runs(platform.brokers.of_tier("maintenance").jobs, start)
    for run in runs:
        click.echo(f"{'match   ' if run.matched else 'DIVERGED'} {run.describe()}")
    diverged = sum(1 for run in runs if not run.matched)
    click.echo(f"shadow runs since {start:%FT%TZ}: {len(runs)}, diverged: {diverged}")
    sys.exit(0 if runs and not diverged else 1)


def register(main: click.Group) -> None:
    main.add_command(maintenance)
