"""Real PostgreSQL for tests: one migrated database per pytest-xdist worker.

``database_url`` creates ``speedtier_test_<worker>_<random>`` on the server named by
``TEST_DATABASE_URL`` (or ``DATABASE_URL``), migrates both branches and drops it at the end
of the session. ``session`` wraps one test in a transaction rolled back afterwards, even
when the code under test commits (it commits a savepoint). Tests that need real commits,
for example across threads or processes, use ``db_session_factory`` and clean up after
themselves or use unique ids.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade

SERVER_URL = (
    os.environ.get("TEST_DATABASE_URL")
    or os.environ.get("DATABASE_URL")
    or "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _libpq_url(url: str, database: str) -> str:
    """``url`` pointed at ``database``, as a plain ``postgresql://`` URL for psycopg."""
    parsed = make_url(url).set(drivername="postgresql", database=database)
    return parsed.render_as_string(hide_password=False)


def _admin_connection() -> psycopg.Connection[Any]:
    admin_database = make_url(SERVER_URL).database or "postgres"
    try:
        return psycopg.connect(
            _libpq_url(SERVER_URL, admin_database), autocommit=True, connect_timeout=10
        )
    except psycopg.OperationalError as exc:  # fail loudly: CI must have PostgreSQL
        pytest.fail(f"PostgreSQL is not reachable at {SERVER_URL}: {exc}", pytrace=False)


def create_database(prefix: str = "speedtier_test") -> str:
    """Create an empty database with a unique name; return its URL."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"{prefix}_{worker}_{uuid.uuid4().hex[:8]}"
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return _libpq_url(SERVER_URL, name)


def drop_database(url: str) -> None:
    """Drop the database of ``url``, disconnecting whoever is still on it."""
    name = make_url(url).database
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A database migrated with both branches, private to this test worker."""
    url = create_database()
    try:
        upgrade(url)
        yield url
    finally:
        drop_database(url)


@pytest.fixture
def empty_database_url() -> Iterator[str]:
    """A fresh, empty (unmigrated) database for one test, dropped afterwards."""
    url = create_database("speedtier_empty")
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def joined_session(engine: Engine) -> Iterator[Session]:
    """A session whose work is rolled back at the end, commits included.

    SQLAlchemy's "join an external transaction" recipe: the session runs inside an outer
    transaction and turns its own commits into savepoint releases.
    """
    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session whose work is rolled back after the test (:func:`joined_session`)."""
    yield from joined_session(engine)


@pytest.fixture
def db_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that really commit; tests using it clean up or use unique ids."""
    return make_session_factory(engine)
