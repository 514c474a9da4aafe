"""``speedtier alive``: the liveness probe of workers and the scheduler.

It reads the process's heartbeat file (:mod:`shared.heartbeat`) and nothing else: a Redis or
PostgreSQL outage makes a pod unready (``speedtier ready``), never dead, so an outage does
not restart every pod at once.
"""

from __future__ import annotations

import sys

import click

from shared.cli_types import Seconds
from shared.heartbeat import MAX_AGE_SECONDS, age, heartbeat_path
from tiers.table import TIERS

#: The processes that beat: each tier's worker pool and the scheduler. (The tier table, not
#: ``shared.config``: a liveness probe runs every few seconds and need not import pydantic.)
COMPONENTS = ("scheduler", *(f"worker-{tier}" for tier in TIERS))


@click.command("alive")
@click.argument("component", type=click.Choice(COMPONENTS))
@click.option(
    "--max-age",
    type=Seconds(min=1, max=30 * 86_400),
    default=MAX_AGE_SECONDS,
    show_default=True,
    help="Oldest heartbeat, in seconds, that still counts as alive.",
)
def alive(component: str, max_age: float) -> None:
    """Exit 0 when COMPONENT (worker-fast, worker-slow, worker-maintenance, scheduler) beat
    within MAX_AGE seconds, 1 otherwise."""
    path = heartbeat_path(component)
    seconds = age(path)
    if seconds is None:
        click.echo(f"{component}: no heartbeat yet ({path})", err=True)
        sys.exit(1)
    if seconds > max_age:
        click.echo(f"{component}: last heartbeat {seconds:.0f}s ago (> {max_age:.0f}s)", err=True)
        sys.exit(1)
    click.echo(f"{component}: alive (beat {seconds:.1f}s ago)")


def register(main: click.Group) -> None:
    main.add_command(alive)
