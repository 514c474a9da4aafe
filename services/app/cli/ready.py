"""``speedtier ready``: the readiness probe of workers and the scheduler."""

from __future__ import annotations

import sys

import click

from services.app.readiness import CHECK_TIMEOUT_SECONDS, check_readiness, is_ready
from shared.cli_types import Seconds
from shared.config import load_settings
from shared.runtime_file import resolve


@click.command("ready")
@click.option(
    "--timeout",
    type=Seconds(min=0.1, max=3600),
    default=CHECK_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds each check may take.",
)
def ready(timeout: float) -> None:
    """Exit 0 when Redis and PostgreSQL answer (and, in production and staging, every Redis
    refuses to evict keys), 1 (naming what failed) otherwise."""
    checks = check_readiness(resolve(load_settings()), timeout=timeout)
    for name, error in checks.items():
        if error is None:
            click.echo(f"{name}: ok")
        else:
            click.echo(f"{name}: not ready: {error}", err=True)
    if not is_ready(checks):
        sys.exit(1)


def register(main: click.Group) -> None:
    main.add_command(ready)
