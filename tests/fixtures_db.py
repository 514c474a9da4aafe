"""Real PostgreSQL for tests: one migrated database per test module.

Each pytest process (each pytest-xdist worker) migrates both branches once, into a template
database ``speedtier_template_<worker>_<random>`` on the server named by
``TEST_DATABASE_URL`` (or ``DATABASE_URL``). ``database_url`` gives every test module that
asks for it a copy of that template (``CREATE DATABASE ... TEMPLATE``, about 0.1 s), dropped
when the module ends. So the rows a module commits are seen by no other module, whichever
worker and whatever order pytest-xdist gives it: a test that reads a whole table sees only
what its own module wrote.

Within a module, ``session`` wraps one test in a transaction rolled back afterwards, even
when the code under test commits (it commits a savepoint). Tests that need real commits,
for example across threads or processes, use ``db_session_factory``; tests of one module
run in one process, in file order, and clean up after themselves or use unique ids.
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
from testkit.scenario_database import database_url as url_on_server
from testkit.scenario_database import server_database_url

SERVER_URL = server_database_url()


def _admin_connection(server_url: str) -> psycopg.Connection[Any]:
    admin_database = make_url(server_url).database or "postgres"
    try:
        return psycopg.connect(
            url_on_server(server_url, admin_database), autocommit=True, connect_timeout=10
        )
    except psycopg.OperationalError as exc:  # fail loudly: CI must have PostgreSQL
        pytest.fail(f"PostgreSQL is not reachable at {server_url}: {exc}", pytrace=False)


def create_database(
    prefix: str = "speedtier_test", *, template: str | None = None, server_url: str = SERVER_URL
) -> str:
    """Create a database with a unique name on ``server_url``'s server; return its URL.

    Parameters:
      prefix: the start of its name (the xdist worker and a random suffix follow).
      template: the URL of a database to copy (nobody may be connected to it); by default
        the database is empty.
      server_url: a database on the server to create it on, used for the ``CREATE``.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"{prefix}_{worker}_{uuid.uuid4().hex[:8]}"
    statement = f'CREATE DATABASE "{name}"'
    if template is not None:
        statement += f' TEMPLATE "{make_url(template).database}"'
    with _admin_connection(server_url) as admin:
        admin.execute(statement)
    return url_on_server(server_url, name)


def drop_database(url: str, *, server_url: str = SERVER_URL) -> None:
    """Drop the database of ``url``, disconnecting whoever is still on it."""
    name = make_url(url).database
    with _admin_connection(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrated_template(server_url: str = SERVER_URL) -> Iterator[str]:
    """A database migrated with both branches, to copy (never to connect to), then dropped."""
    url = create_database("speedtier_template", server_url=server_url)
    try:
        upgrade(url)  # its engine has no pool: nothing stays connected to the template
        yield url
    finally:
        drop_database(url, server_url=server_url)


def copied_database(template: str, server_url: str = SERVER_URL) -> Iterator[str]:
    """A copy of ``template`` for one test module, dropped after it."""
    url = create_database(template=template, server_url=server_url)
    try:
        yield url
    finally:
        drop_database(url, server_url=server_url)


@pytest.fixture(scope="session")
def template_database_url() -> Iterator[str]:
    """This process's migrated template, which each module's ``database_url`` copies."""
    yield from migrated_template()


@pytest.fixture(scope="module")
def database_url(template_database_url: str) -> Iterator[str]:
    """A migrated database private to this test module (a copy of the template)."""
    yield from copied_database(template_database_url)


@pytest.fixture
def empty_database_url() -> Iterator[str]:
    """A fresh, empty (unmigrated) database for one test, dropped afterwards."""
    url = create_database("speedtier_empty")
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="module")
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
