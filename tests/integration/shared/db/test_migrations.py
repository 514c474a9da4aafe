"""Migrations and models agree, and both branches move up and down independently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import MetaData, inspect, text

import shared.db.models  # noqa: F401  (registers every table)
from services.app.cli import db as db_cli
from shared.db import migrate
from shared.db.base import API2_SCHEMA, Api2Base, RailsBase
from shared.db.engine import database_url as psycopg_url
from shared.db.engine import make_engine

RAILS_TABLES = set(RailsBase.metadata.tables)
API2_TABLES = {table.name for table in Api2Base.metadata.tables.values()}
METADATA = {"rails": RailsBase.metadata, "api2": Api2Base.metadata}
SCHEMAS: dict[str, set[str | None]] = {"rails": {None, "public"}, "api2": {API2_SCHEMA}}


def _diff(url: str, branch: str) -> list[Any]:
    """Autogenerate's differences between ``branch``'s metadata and the database."""
    schemas = SCHEMAS[branch]

    def include_name(name: str | None, type_: str, parent_names: object) -> bool:
        return name in schemas if type_ == "schema" else True

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "include_schemas": True,
                    "include_name": include_name,
                    "version_table": migrate.VERSION_TABLE,
                    "version_table_schema": migrate.VERSION_TABLE_SCHEMA,
                    "compare_type": True,
                    "compare_server_default": True,
                },
            )
            metadata: MetaData = METADATA[branch]
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> dict[str, set[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            inspector = inspect(connection)
            return {
                "rails": set(inspector.get_table_names(schema="public")),
                "api2": set(inspector.get_table_names(schema=API2_SCHEMA)),
            }
    finally:
        engine.dispose()


@pytest.mark.parametrize("branch", ["rails", "api2"])
def test_models_match_migrations(database_url: str, branch: str) -> None:
    assert _diff(database_url, branch) == []


def test_comparison_notices_drift(empty_database_url: str) -> None:
    # Given a migrated database whose schema then drifts from the models
    migrate.upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE organizations ADD COLUMN stray text"))
        connection.execute(
            text("ALTER TABLE api2.knowledge_base_crawl_task_urls ALTER COLUMN depth TYPE bigint")
        )
    engine.dispose()

    # Then the comparison reports it on both branches (the check is not vacuous)
    assert [d[0] for d in _diff(empty_database_url, "rails")] == ["remove_column"]
    assert [d[0][0] for d in _diff(empty_database_url, "api2")] == ["modify_type"]


def test_upgrade_creates_every_table_and_is_repeatable(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)
    migrate.upgrade(empty_database_url)

    assert migrate.current(empty_database_url) == migrate.heads()
    tables = _tables(empty_database_url)
    assert tables["rails"] == RAILS_TABLES
    assert tables["api2"] == API2_TABLES | {migrate.VERSION_TABLE}


@pytest.mark.parametrize(("branch", "other"), [("rails", "api2"), ("api2", "rails")])
def test_branch_downgrades_to_base_and_upgrades_again(
    empty_database_url: str, branch: str, other: str
) -> None:
    # Given both branches applied
    migrate.upgrade(empty_database_url)

    # When one branch goes down to base
    migrate.downgrade(empty_database_url, branch=branch)

    # Then its tables are gone and the other branch is untouched
    assert migrate.current(empty_database_url) == {branch: None, other: migrate.heads()[other]}
    tables = _tables(empty_database_url)
    assert tables["rails"] == (set() if branch == "rails" else RAILS_TABLES)
    assert tables["api2"] == {migrate.VERSION_TABLE} | (set() if branch == "api2" else API2_TABLES)

    # And upgrading again restores exactly the models' schema
    migrate.upgrade(empty_database_url, branches=[branch])
    assert migrate.current(empty_database_url) == migrate.heads()
    assert _diff(empty_database_url, "rails") == []
    assert _diff(empty_database_url, "api2") == []


def test_api2_alone_migrates_an_empty_database(empty_database_url: str) -> None:
    # Given a database like the one Rails owns: no schema api2, no mirror tables
    migrate.upgrade(empty_database_url, branches=["api2"])

    assert migrate.current(empty_database_url) == {
        "rails": None,
        "api2": migrate.heads()["api2"],
    }
    tables = _tables(empty_database_url)
    assert tables["rails"] == set()
    assert tables["api2"] == API2_TABLES | {migrate.VERSION_TABLE}
    assert _diff(empty_database_url, "api2") == []


def test_current_of_an_empty_database(empty_database_url: str) -> None:
    assert migrate.current(empty_database_url) == {"rails": None, "api2": None}


@pytest.mark.parametrize("branches", [["nope"], "api2"])
def test_unknown_branches_are_rejected(branches: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        migrate.upgrade("postgresql://unused/none", branches=branches)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h:5432/d", "postgresql+psycopg://u@h:5432/d"),
        ("postgres://u@h/d", "postgresql+psycopg://u@h/d"),
        ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
    ],
)
def test_urls_are_pinned_to_psycopg(given: str, expected: str) -> None:
    assert psycopg_url(given).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgresql+psycopg2://u@h/d"])
def test_other_drivers_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="psycopg"):
        psycopg_url(url)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    # no `speedtier up` running from the checkout may lend its database to these commands
    monkeypatch.setenv("SPEEDTIER_DATA_DIR", str(tmp_path / "data"))
    return CliRunner()


def _db_group() -> click.Group:
    group = click.Group("speedtier")
    db_cli.register(group)
    return group


def test_cli_upgrade_and_current(
    cli: CliRunner, empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", empty_database_url)

    upgraded = cli.invoke(_db_group(), ["db", "upgrade", "--branch", "api2"])
    assert upgraded.exit_code == 0, upgraded.output
    assert "upgraded: api2" in upgraded.output

    shown = cli.invoke(_db_group(), ["db", "current"])
    assert shown.exit_code == 0, shown.output
    assert "rails: (not applied)" in shown.output
    assert f"api2: {migrate.heads()['api2']} (up to date)" in shown.output


def test_cli_without_database_url_fails_clearly(cli: CliRunner) -> None:
    result = cli.invoke(_db_group(), ["db", "upgrade"])

    assert result.exit_code == 1
    assert "DATABASE_URL is not set" in result.output
