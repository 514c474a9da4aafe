"""``speedtier jobs show|retry|discard|cancel ID`` and ``speedtier status``: what the queues
hold, and the operator's actions on one job (the dashboard's, through the same scripts and
into the same audit, by ``cli:<user>``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from shared.config import TIER_NAMES

_TIMESTAMPS = ("created_at", "started_at", "finished_at")


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromtimestamp(int(value) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@click.group("jobs")
def jobs() -> None:
    """Inspect jobs."""


@jobs.command("show")
@click.argument("job_id")
def show(job_id: str) -> None:
    """Print a job's state, attempts, timestamps and last error."""
    from services.app.bootstrap import bootstrap

    platform = bootstrap(component="cli")
    found = platform.brokers.find(job_id)
    if found is None:
        click.echo(f"no job {job_id!r} (never enqueued, or its record expired)", err=True)
        sys.exit(1)
    broker, record = found
    ttl = broker.client.ttl(broker.jobs.record_key(job_id))
    click.echo(f"job        {job_id}")
    click.echo(f"state      {record.get('state')}")
    click.echo(f"family     {record.get('family', '-')}  queue {record.get('queue', '-')}")
    click.echo(f"org        {record.get('org') or '-'}  group {record.get('group') or '-'}")
    click.echo(
        f"attempts   {record.get('attempts', '0')} ended, {record.get('failures', '0')} failed"
    )
    for field in _TIMESTAMPS:
        click.echo(f"{field:<10} {_when(record.get(field))}")
    click.echo(f"last error {record.get('last_error') or '-'}")
    click.echo(f"last delay {record.get('last_delay') or '-'}")
    click.echo(f"expires in {f'{ttl}s' if ttl and ttl > 0 else 'never (live)'}")
    # The job's durable state (tiers.job_state): completed steps and the values it kept.
    for field in sorted(name for name in record if name.startswith(("step:", "data:"))):
        click.echo(f"{field:<10} {record[field]}")


def _act(action: str, job_id: str) -> None:
    from services.app.bootstrap import bootstrap
    from shared import audit
    from tiers.cancellation import request_cancel
    from tiers.dead_letters import DeadLetters

    platform = bootstrap(component="cli")
    try:
        operator = audit.cli_operator()
        broker = platform.brokers.broker_of_job(job_id)
        if action == "cancel":
            ns = platform.settings.redis_namespace
            outcome = request_cancel(broker.client, ns, job_id, operator)
            done = outcome == "requested"
        else:
            letters = DeadLetters(broker.jobs)
            outcome = (
                letters.retry(job_id, operator)
                if action == "retry"
                else letters.discard(job_id, operator)
            )
            done = outcome in ("waiting", "parked", "discarded")
        audit.record_after(platform.sessions, operator, action, job_id, outcome)
    finally:
        platform.close()
    if not done:
        past = {"retry": "retried", "discard": "discarded", "cancel": "cancelled"}[action]
        raise click.ClickException(f"{job_id} was not {past}: {outcome}")
    click.echo(f"{job_id}: {outcome}")


@jobs.command("retry")
@click.argument("job_id")
def retry(job_id: str) -> None:
    """Send failed job JOB_ID back to its queue, attempts reset (as the dashboard's Retry)."""
    _act("retry", job_id)


@jobs.command("discard")
@click.argument("job_id")
def discard(job_id: str) -> None:
    """Drop failed job JOB_ID's dead letter for good."""
    _act("discard", job_id)


@jobs.command("cancel")
@click.argument("job_id")
def cancel(job_id: str) -> None:
    """Cancel queued or running job JOB_ID: it stops at its next step or provider call, or is
    stopped after SPEEDTIER_CANCEL_GRACE_SECONDS; it ends cancelled and is not retried."""
    _act("cancel", job_id)


@click.command("status")
def status() -> None:
    """Queue depths per tier: ready, delayed and failed (dead-lettered) messages, and kill
    switches."""
    from services.app.bootstrap import bootstrap

    platform = bootstrap(component="cli")
    for tier in TIER_NAMES:
        queues = platform.registry.queues_of_tier(tier)
        broker = platform.brokers.of_tier(tier)
        depths = broker.queue_depths(queues)
        failures = broker.queue_failures(queues)
        ready = sum(d[0] for d in depths.values())
        delayed = sum(d[1] for d in depths.values())
        click.echo(f"{tier}: {ready} ready, {delayed} delayed, {sum(failures.values())} failed")
        for queue, (queue_ready, queue_delayed) in sorted(depths.items()):
            click.echo(
                f"  {queue:<40} {queue_ready:>7} ready {queue_delayed:>7} delayed "
                f"{failures[queue]:>7} failed"
            )
    for flag, on in platform.flags.states(platform.registry.pause_flags()).items():
        click.echo(f"flag {flag}: {'PAUSED' if on else 'running'}")


@click.command("queues")
@click.option("--tier", type=click.Choice(TIER_NAMES), help="Only this tier's queues.")
def queues(tier: str | None) -> None:
    """List the queues of the registered families, one per line (a tier's worker consumes
    them; the chart's ``tiers.<tier>.queues`` must list the same)."""
    from services.app.bootstrap import bootstrap

    platform = bootstrap(component="cli")
    try:
        for name in [tier] if tier else TIER_NAMES:
            for queue in platform.registry.queues_of_tier(name):
                click.echo(queue if tier else f"{name} {queue}")
    finally:
        platform.close()


def register(main: click.Group) -> None:
    main.add_command(jobs)
    main.add_command(status)
    main.add_command(queues)
