"""A fresh PostgreSQL database for a scenario or a benchmark, on the server the tests use,
and its removal afterwards."""

from __future__ import annotations

import os
import uuid
from typing import Any


def server_database_url() -> str:
    """The PostgreSQL server to make databases on (``TEST_DATABASE_URL``, ``DATABASE_URL``,
    or the local one)."""
    return (
        os.environ.get("TEST_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres"
    )


def database_url(server_url: str, database: str) -> str:
    """``server_url`` pointing at ``database`` (a libpq URL: psycopg and the settings take it)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(server_url).set(drivername="postgresql", database=database)
    return parsed.render_as_string(hide_password=False)


def admin_connection(server_url: str) -> Any:
    """An autocommit connection to the server's own database (to create and drop others)."""
    import psycopg
    from sqlalchemy.engine import make_url

    admin_db = make_url(server_url).database or "postgres"
    return psycopg.connect(database_url(server_url, admin_db), autocommit=True, connect_timeout=10)


def new_database(server_url: str, prefix: str) -> str:
    """A new empty database named ``<prefix><8 hex digits>``; its URL."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    with admin_connection(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return database_url(server_url, name)


def create_database(server_url: str, prefix: str = "speedtier_kb_e2e_") -> str:
    """A new database migrated with both branches; its URL."""
    from shared.db.migrate import upgrade

    url = new_database(server_url, prefix)
    upgrade(url)
    return url


def drop_database(server_url: str, url: str) -> None:
    """Drop the database of ``url`` (its sessions ended first)."""
    from sqlalchemy.engine import make_url

    with admin_connection(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
