"""A log of which transactions changed which tenant's chunks, for retrieval's vector cache.

Retrieval may keep a tenant's vectors in the searching process
(:mod:`services.ingestion.vector_cache`) and must know, before it trusts them, whether any
transaction has changed that tenant's chunks since they were read. This migration records
it, without a lock that writers would wait on:

* ``kb_chunk_changes (organization_id, txid, changed_at)``: one row per transaction that
  inserted, updated or deleted a tenant's chunks (``txid`` is the writer's
  ``pg_current_xact_id()``, kept as a ``bigint``; the primary key makes a second
  statement of the same transaction a no-op). Writers of different transactions insert
  different rows, so none waits on another.
* statement-level triggers on ``kb_chunks`` (insert, update, delete, each with its
  transition table) write those rows; a ``TRUNCATE`` writes organization ``0``, which
  every tenant's check reads as "changed".

A reader that loaded a tenant's vectors under snapshot ``S`` asks whether a row of that
tenant (or of ``0``) has a ``txid`` not visible in ``S``: committed after ``S`` was taken,
or in progress then. Rows with ``txid`` below ``pg_snapshot_xmin(S)`` are all visible to
``S``, so the question is a short range scan of the primary key. Rows older than a day are
deleted by the triggers themselves, a batch in one writing transaction out of 64.

Only where ``embedding`` is a pgvector ``vector`` (the cache's only storage); elsewhere
nothing is created.

Revision ID: api2_0007
Revises: api2_0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "api2_0007"
down_revision: str | Sequence[str] | None = "api2_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "api2"
TABLE = "kb_chunk_changes"
FUNCTION = "note_kb_chunk_change"
#: How long a row is kept: a cache trusts what it loaded for a minute at most, so a row
#: matters only while a transaction that wrote chunks may still be committing after a
#: cache read around it.
RETENTION = "1 day"
#: One writing transaction in this many (by transaction id) also deletes up to
#: ``PRUNE_BATCH`` rows older than ``RETENTION``: the table stays about a day of writes long.
PRUNE_EVERY = 64
PRUNE_BATCH = 1_000
_EVENTS = {
    "insert": "REFERENCING NEW TABLE AS changed_new",
    "update": "REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new",
    "delete": "REFERENCING OLD TABLE AS changed_old",
}


def _has_vectors() -> bool:
    """Whether ``kb_chunks.embedding`` is a pgvector ``vector``."""
    if context.is_offline_mode():
        return True  # offline SQL is written for a production server, which has pgvector
    found = op.get_bind().execute(
        sa.text(
            "SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding' "
            "AND NOT a.attisdropped AND t.typname = 'vector'"
        ),
        {"table": f"{SCHEMA}.kb_chunks"},
    )
    return found.first() is not None


def upgrade() -> None:
    if not _has_vectors():
        return
    op.execute(
        f"CREATE TABLE {SCHEMA}.{TABLE} (organization_id bigint NOT NULL, "
        "txid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint, "
        "changed_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
        f"CONSTRAINT pk_{TABLE} PRIMARY KEY (organization_id, txid))"
    )
    op.execute(f"CREATE INDEX ix_{TABLE}_changed_at ON {SCHEMA}.{TABLE} (changed_at)")
    insert = f"INSERT INTO {SCHEMA}.{TABLE} (organization_id) SELECT DISTINCT organization_id"
    # The oldest rows, a bounded batch, skipping rows another pruner holds: no writer
    # waits on another.
    prune = (
        f"DELETE FROM {SCHEMA}.{TABLE} WHERE ctid IN (SELECT ctid FROM {SCHEMA}.{TABLE} "
        f"WHERE changed_at < clock_timestamp() - interval '{RETENTION}' ORDER BY changed_at "
        f"LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED)"
    )
    op.execute(
        f"""
        CREATE FUNCTION {SCHEMA}.{FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                {insert} FROM changed_new ON CONFLICT DO NOTHING;
            ELSIF TG_OP = 'DELETE' THEN
                {insert} FROM changed_old ON CONFLICT DO NOTHING;
            ELSIF TG_OP = 'UPDATE' THEN
                {insert} FROM (SELECT organization_id FROM changed_old UNION ALL
                    SELECT organization_id FROM changed_new) AS changed ON CONFLICT DO NOTHING;
            ELSE
                INSERT INTO {SCHEMA}.{TABLE} (organization_id) VALUES (0) ON CONFLICT DO NOTHING;
            END IF;
            IF pg_current_xact_id()::text::bigint % {PRUNE_EVERY} = 0 THEN
                {prune};
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    for event, referencing in _EVENTS.items():
        op.execute(
            f"CREATE TRIGGER tr_kb_chunks_note_{event} AFTER {event.upper()} ON "
            f"{SCHEMA}.kb_chunks {referencing} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {SCHEMA}.{FUNCTION}()"
        )
    op.execute(
        f"CREATE TRIGGER tr_kb_chunks_note_truncate AFTER TRUNCATE ON {SCHEMA}.kb_chunks "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {SCHEMA}.{FUNCTION}()"
    )


def downgrade() -> None:
    for event in (*_EVENTS, "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS tr_kb_chunks_note_{event} ON {SCHEMA}.kb_chunks")
    op.execute(f"DROP FUNCTION IF EXISTS {SCHEMA}.{FUNCTION}()")
    op.execute(f"DROP TABLE IF EXISTS {SCHEMA}.{TABLE}")
