"""A large tenant's own HNSW index: ``USING hnsw (embedding vector_cosine_ops) WHERE
organization_id = <id>`` on ``api2.kb_chunks``.

The shared HNSW index holds every tenant's chunks. Filtered to one organization, a walk meets
everyone's chunks and keeps the tenant's: pgvector 0.8's iterative scan walks on until
enough pass, paying for the others on the way, and what it finds is the shared graph's
approximation of the tenant's neighbours. For a tenant above the exact threshold (the
tenants retrieval sends to the index, :mod:`services.ingestion.search`), an index of its
own chunks makes the walk the tenant's graph alone. Search needs nothing more: the HNSW
path plans each query for its organization (never a prepared statement's generic plan),
and the planner picks the partial index for that organization's queries. On 100,000
chunks of hashing-embedder vectors, the HNSW path of a tenant holding 10% of them found
0.94 of the exact top 10 with its own index and 0.75 with the shared one.

Each index costs what an HNSW index of that many chunks costs (memory, build time, one
more index to update per chunk written); the shared index keeps serving every tenant.
An index is created ``CONCURRENTLY`` (writes go on meanwhile), so outside a transaction.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from shared.db.vector import TENANT_INDEX_PREFIX

_NAME = re.compile(re.escape(TENANT_INDEX_PREFIX) + r"(\d+)$")


def index_name(organization_id: int) -> str:
    """The name of ``organization_id``'s own HNSW index."""
    if isinstance(organization_id, bool) or not isinstance(organization_id, int):
        raise TypeError(f"organization_id must be an int, got {organization_id!r}")
    if organization_id < 1:
        raise ValueError(f"organization_id must be positive, got {organization_id}")
    return f"{TENANT_INDEX_PREFIX}{organization_id}"


def create_tenant_index(
    engine: Engine, organization_id: int, *, maintenance_work_mem: str = "512MB"
) -> bool:
    """Build the organization's own HNSW index (``CREATE INDEX CONCURRENTLY``); False
    when it exists already. ``maintenance_work_mem`` holds the graph while it is built. A
    build that failed half-way leaves an invalid index: it is dropped and built again.

    Raises:
      ValueError: the embeddings are not pgvector's (the ``float8[]`` fallback).
    """
    name = index_name(organization_id)
    with engine.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        if not _has_pgvector_embeddings(connection):
            raise ValueError("api2.kb_chunks.embedding is not a pgvector column: no HNSW index")
        valid = _validity(connection, name)
        if valid:
            return False
        if valid is not None:
            connection.execute(text(f"DROP INDEX CONCURRENTLY api2.{name}"))
        connection.execute(
            text("SELECT set_config('maintenance_work_mem', :m, false)"),
            {"m": maintenance_work_mem},
        )
        try:
            connection.execute(
                text(
                    f"CREATE INDEX CONCURRENTLY {name} ON api2.kb_chunks "
                    "USING hnsw (embedding vector_cosine_ops) "
                    f"WHERE organization_id = {int(organization_id)}"
                )
            )
        finally:
            connection.execute(text("RESET maintenance_work_mem"))
    return True


def drop_tenant_index(engine: Engine, organization_id: int) -> bool:
    """Drop the organization's own HNSW index; False when it has none."""
    name = index_name(organization_id)
    with engine.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        if _validity(connection, name) is None:
            return False
        connection.execute(text(f"DROP INDEX CONCURRENTLY api2.{name}"))
    return True


def tenant_indexes(session: Session) -> list[int]:
    """The organizations that have an HNSW index of their own."""
    names = session.scalars(
        text(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'api2' "
            "AND tablename = 'kb_chunks' AND starts_with(indexname, :prefix)"
        ),
        {"prefix": TENANT_INDEX_PREFIX},
    )
    found = (_NAME.match(str(name)) for name in names)
    return sorted(int(match.group(1)) for match in found if match)


def _validity(connection: Connection, name: str) -> bool | None:
    """Whether the index is valid; None when there is none."""
    valid = connection.execute(
        text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
        {"name": f"api2.{name}"},
    ).scalar_one_or_none()
    return None if valid is None else bool(valid)


def _has_pgvector_embeddings(connection: Connection) -> bool:
    return bool(
        connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = 'api2.kb_chunks'::regclass AND a.attname = 'embedding' "
                "AND t.typname = 'vector')"
            )
        ).scalar_one()
    )
