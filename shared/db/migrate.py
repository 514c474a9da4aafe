"""Alembic, run from code: no ``alembic.ini`` is needed at runtime.

Two branches, each with its own base revision:

``rails``
  the mirror of the Rails-owned tables (schema ``public``). For development, tests and the
  demo only: never apply it to a database Rails owns.
``api2``
  this project's tables (schema ``api2``), applied everywhere. The Alembic version table
  lives in ``api2`` too, so this project leaves nothing of its own in ``public``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from shared.db.base import API2_SCHEMA
from shared.db.engine import make_engine

BRANCHES: tuple[str, ...] = ("rails", "api2")
VERSION_TABLE = "alembic_version"
VERSION_TABLE_SCHEMA = API2_SCHEMA
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

# Serialises concurrent upgrades (a migrations Job and `speedtier up`) on one database.
_LOCK_KEY = "speedtier-migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic ``Config`` built in code, pointing at the packaged migrations.

    Parameters:
      connection: when given, ``env.py`` runs the migrations on it instead of connecting.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "newline")
    config.set_main_option(
        "version_locations",
        "\n".join(str(MIGRATIONS_DIR / "versions" / branch) for branch in BRANCHES),
    )
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _check_branches(branches: Sequence[str]) -> None:
    if isinstance(branches, str):
        raise TypeError("branches must be a sequence of branch names, not a string")
    unknown = [branch for branch in branches if branch not in BRANCHES]
    if unknown:
        raise ValueError(f"unknown migration branch(es) {unknown}; expected one of {BRANCHES}")


def _run(database_url: str | URL, *targets: tuple[str, str]) -> None:
    engine = make_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
                {"key": _LOCK_KEY},
            )
            config = alembic_config(connection)
            for action, revision in targets:
                if action == "upgrade":
                    command.upgrade(config, revision)
                else:
                    command.downgrade(config, revision)
    finally:
        engine.dispose()


def upgrade(database_url: str | URL, *, branches: Sequence[str] = BRANCHES) -> None:
    """Upgrade each of ``branches`` to its head, in order, in one transaction.

    Raises:
      ValueError: for an unknown branch name.
    """
    _check_branches(branches)
    _run(database_url, *(("upgrade", f"{branch}@head") for branch in branches))


def downgrade(database_url: str | URL, *, branch: str, revision: str = "base") -> None:
    """Downgrade one branch to ``revision`` of that branch (``base`` removes all of it)."""
    _check_branches([branch])
    _run(database_url, ("downgrade", f"{branch}@{revision}"))


def _branch_of(script: ScriptDirectory, revision_id: str) -> str | None:
    revision = script.get_revision(revision_id)
    if revision is None:
        return None
    return next((branch for branch in BRANCHES if branch in revision.branch_labels), None)


def current(database_url: str | URL) -> dict[str, str | None]:
    """The applied revision of each branch (``None`` when the branch is not applied)."""
    script = ScriptDirectory.from_config(alembic_config())
    engine = make_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"version_table": VERSION_TABLE, "version_table_schema": VERSION_TABLE_SCHEMA},
            )
            applied_heads = context.get_current_heads()
    finally:
        engine.dispose()
    applied: dict[str, str | None] = dict.fromkeys(BRANCHES)
    for head in applied_heads:
        branch = _branch_of(script, head)
        if branch is not None:
            applied[branch] = head
    return applied


def heads() -> dict[str, str]:
    """The newest revision of each branch in the packaged migrations."""
    script = ScriptDirectory.from_config(alembic_config())
    newest: dict[str, str] = {}
    for head in script.get_heads():
        branch = _branch_of(script, head)
        if branch is not None:
            newest[branch] = head
    return newest
