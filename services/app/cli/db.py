"""``speedtier db``: database migrations (Alembic branches ``rails`` and ``api2``)."""

from __future__ import annotations

import click
from sqlalchemy.engine import make_url

from shared.config import load_settings
from shared.db import migrate
from shared.runtime_file import resolve


def _database_url() -> str:
    url = resolve(load_settings()).database_url
    if not url:
        raise click.ClickException(
            "DATABASE_URL is not set and no `speedtier up` runs from this folder; export it, "
            "e.g. DATABASE_URL=postgresql://user@host:5432/dbname"
        )
    return url


@click.group("db")
def db() -> None:
    """Database migrations."""


@db.command("upgrade")
@click.option(
    "--branch",
    type=click.Choice(["rails", "api2", "all"]),
    default="all",
    show_default=True,
    help="Which branch to migrate. Use 'api2' on a database Rails owns: "
    "'rails' only mirrors Rails' tables for development, tests and the demo.",
)
def upgrade(branch: str) -> None:
    """Upgrade the database to the newest revision of the chosen branch(es)."""
    branches = migrate.BRANCHES if branch == "all" else (branch,)
    migrate.upgrade(_database_url(), branches=branches)
    click.echo(f"upgraded: {', '.join(branches)}")


@db.command("current")
def current() -> None:
    """Show the applied revision of each branch and the newest available."""
    url = _database_url()
    applied = migrate.current(url)
    heads = migrate.heads()
    click.echo(f"database: {make_url(url).render_as_string(hide_password=True)}")
    for branch, revision in applied.items():
        state = "up to date" if revision == heads[branch] else f"head is {heads[branch]}"
        click.echo(f"{branch}: {revision or '(not applied)'} ({state})")


def register(main: click.Group) -> None:
    """Add the ``db`` group to the ``speedtier`` command."""
    main.add_command(db)
