"""``speedtier scheduler``, ``speedtier ticks`` and ``speedtier tick NAME``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import click

from router.ticks import Tick
from services.app.bootstrap import Platform, bootstrap
from services.app.scheduler import TickScheduler, next_fire_time
from shared import audit, heartbeat, metrics, progress
from shared.db.base import utcnow


@click.command("scheduler")
def scheduler() -> None:
    """Emit every tick on its UTC cron schedule until SIGTERM (safe to run twice: a leader
    lock lets one replica emit, and slot ids make a double emission run once)."""
    platform = bootstrap(component="scheduler")
    if platform.settings.metrics_port:
        metrics.serve(platform.settings.metrics_port)
    beat_file = heartbeat.heartbeat_path("scheduler")
    try:
        TickScheduler(platform, heartbeat_file=beat_file).run()
    finally:
        heartbeat.clear(beat_file)
        platform.close()


def _pause_states(platform: Platform, ticks: list[Tick]) -> Callable[[Tick], str]:
    """What the PAUSED column says of a tick: its switch's state, every switch read in one
    statement. When they cannot be read (PostgreSQL down) every paused tick's cell names the
    error, and the table still lists the schedule (after one failed read, not one a tick)."""
    try:
        states = platform.flags.states(tick.pause_flag for tick in ticks if tick.pause_flag)
        unread = None
    except Exception as exc:
        states, unread = {}, f"? ({type(exc).__name__})"

    def paused(tick: Tick) -> str:
        if not tick.pause_flag:
            return "no"
        if unread is not None:
            return unread
        return "YES" if states[tick.pause_flag] else "no"

    return paused


def schedule_rows(platform: Platform, now: datetime) -> list[tuple[str, ...]]:
    """One row per tick: name, cron, next fire time (UTC), pause flag, paused?, description."""
    rows: list[tuple[str, ...]] = []
    ticks = sorted(platform.ticks, key=lambda t: t.name)
    paused = _pause_states(platform, ticks)
    for tick in ticks:
        fire = next_fire_time(tick.cron, now)
        rows.append(
            (
                tick.name,
                tick.cron,
                fire.strftime("%Y-%m-%d %H:%M UTC") if fire else "never",
                tick.pause_flag or "-",
                paused(tick),
                tick.description,
            )
        )
    return rows


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


@click.command("ticks")
def ticks() -> None:
    """List the ticks with their next fire time (UTC) and pause state."""
    platform = bootstrap(component="cli")
    try:
        header = ("NAME", "CRON", "NEXT (UTC)", "PAUSE FLAG", "PAUSED", "DESCRIPTION")
        click.echo(format_table(header, schedule_rows(platform, utcnow())))
    finally:
        platform.close()


def manual_slot(now: datetime) -> str:
    """The slot id of a manual run: ``manual-2026-11-29T01:02:03Z``."""
    return "manual-" + now.strftime("%Y-%m-%dT%H:%M:%SZ")


@click.command("tick")
@click.argument("name")
def tick(name: str) -> None:
    """Run tick NAME now, in this process (the manual re-drive), unless it is paused."""
    platform = bootstrap(component="cli")
    try:
        try:
            chosen = platform.tick(name)
        except KeyError as exc:
            raise click.ClickException(str(exc.args[0])) from None
        if chosen.pause_flag and platform.flags.is_enabled(chosen.pause_flag):
            raise click.ClickException(
                f"tick {name} is paused by flag {chosen.pause_flag}; "
                f"lower the flag (speedtier resume) before re-driving it"
            )
        slot = manual_slot(utcnow())
        click.echo(f"{name} {slot}: running")
        with progress.working(f"tick {name}: enqueueing its jobs"):
            summary = chosen.run(slot)
        click.echo(f"{name} {slot}: done {summary}")
        outcome = f"failed {summary['failed']}" if summary.get("failed") else "done"
        audit.record(
            platform.sessions,
            audit.cli_operator(),
            "redrive",
            f"tick {name} {slot}",
            outcome,
            str(summary),
        )
        if summary.get("failed"):  # the scheduler retries it; a re-drive by hand says so
            raise click.ClickException(
                f"tick {name}: {summary['failed']} job(s) were not enqueued (see the log)"
            )
    finally:
        platform.close()


def register(main: click.Group) -> None:
    main.add_command(scheduler)
    main.add_command(ticks)
    main.add_command(tick)
