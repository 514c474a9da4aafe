"""Alembic environment for both branches (``rails`` and ``api2``).

Run from code through :mod:`shared.db.migrate`, which hands over a connection in
``config.attributes["connection"]``. Without one (the ``alembic`` command line with
``shared/migrations/alembic.ini``), it connects to ``DATABASE_URL``.
"""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

import shared.db.models  # noqa: F401  (registers every table on the metadata)
from shared.db.base import API2_SCHEMA, Api2Base, RailsBase
from shared.db.engine import make_engine
from shared.db.migrate import VERSION_TABLE, VERSION_TABLE_SCHEMA
from shared.db.vector import compare_type, include_object

config = context.config
target_metadata = [RailsBase.metadata, Api2Base.metadata]
_SCHEMAS = {None, "public", API2_SCHEMA}


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate looks at ``public`` and ``api2`` only."""
    if type_ == "schema":
        return name in _SCHEMAS
    return True


def _configure(**options: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        version_table_schema=VERSION_TABLE_SCHEMA,
        include_schemas=True,
        include_name=include_name,
        # kb_chunks.embedding is vector(dims) with an HNSW index where the server has
        # pgvector and float8[] without one: the migration picks, the model serves both, so
        # autogenerate must accept either type and not ask to drop the pgvector-only index.
        include_object=include_object,
        compare_type=compare_type,
        compare_server_default=True,
        **options,
    )


def _run_on(connection: Connection) -> None:
    # The version table lives in api2, so the schema must exist before Alembic reads it.
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {API2_SCHEMA}"))
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    _configure(url=os.environ["DATABASE_URL"], literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = make_engine(os.environ["DATABASE_URL"], poolclass=NullPool)
    try:
        with engine.begin() as own_connection:
            _run_on(own_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
