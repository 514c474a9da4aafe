"""``speedtier uploads``: the conversation-upload validation checks
(:mod:`services.uploads.checks`) printed pass or fail with the rows behind each."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from router.context import LoadContext
from services.uploads.checks import run_checks
from shared import progress

#: Without ``--deployed-at`` every direct upload ever expired counts (the strictest reading).
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@click.group("uploads")
def uploads() -> None:
    """Conversation uploads: validation checks."""


@uploads.command("check")
@click.option(
    "--deployed-at",
    type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    default=None,
    help="UTC time the fix was deployed ('<deploy timestamp>' of the seed's second query);"
    " without it every expired direct upload counts.",
)
@click.pass_obj
def check(load: LoadContext, deployed_at: datetime | None) -> None:
    """Run the seed's five validation queries and the zero-new-GoodJob query (read-only)."""
    platform = load()
    since = _EPOCH if deployed_at is None else deployed_at.replace(tzinfo=UTC)
    with (
        progress.working("uploads check: running the validation queries"),
        platform.sessions() as session,
    ):
        try:
            checks = run_checks(session, deployed_at=since)
        finally:
            session.rollback()
    for result in checks:
        click.echo(f"[{'pass' if result.passed else 'fail'}] {result.summary}")
        for line in result.details:
            click.echo(f"       {line}")
    sys.exit(0 if all(result.passed for result in checks) else 1)


def register(main: click.Group) -> None:
    """Add ``speedtier uploads`` (its commands get the process's context from the CLI)."""
    main.add_command(uploads)
