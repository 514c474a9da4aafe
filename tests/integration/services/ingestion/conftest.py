"""The ingestion pipeline's fixtures (``test_pipeline*.py``): a local site and its fetcher,
sessions on the float8[] fallback and on pgvector, and committed sessions that clean up
the organizations they made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from services.web.fetch import PageFetch, page_fetcher
from shared.db.engine import make_session_factory
from tests.fixtures_db import joined_session
from tests.integration.services.ingestion.pipeline_support import (
    Site,
    wipe,
)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    site = Site()
    site.thread.start()
    yield site
    site.server.shutdown()
    site.server.server_close()


@pytest.fixture
def fetch() -> PageFetch:
    return page_fetcher(allow_private=True, timeout=5)


@pytest.fixture
def pg_session(pgvector_engine: Engine) -> Iterator[Session]:
    """Like ``session``, on the pgvector database."""
    yield from joined_session(pgvector_engine)


@pytest.fixture(params=["fallback", "pgvector"])
def any_session(request: pytest.FixtureRequest) -> Session:
    """Both storages: ``float8[]`` (default server) and pgvector."""
    name = "session" if request.param == "fallback" else "pg_session"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture(params=["fallback", "pgvector"])
def committed(request: pytest.FixtureRequest) -> Iterator[tuple[sessionmaker[Session], set[int]]]:
    """A committing session factory on either storage, and a set to put organization ids
    in: their rows are deleted afterwards."""
    engine: Engine = request.getfixturevalue(
        "engine" if request.param == "fallback" else "pgvector_engine"
    )
    factory = make_session_factory(engine)
    organizations: set[int] = set()
    yield factory, organizations
    wipe(factory, organizations)


@pytest.fixture
def committed_fallback(engine: Engine) -> Iterator[tuple[sessionmaker[Session], set[int]]]:
    factory = make_session_factory(engine)
    organizations: set[int] = set()
    yield factory, organizations
    wipe(factory, organizations)
