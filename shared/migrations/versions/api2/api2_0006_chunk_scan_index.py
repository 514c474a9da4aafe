"""A compact copy of each chunk's vector for the exact tenant scan of retrieval.

Retrieval ranks a tenant's chunks exactly (every distance computed) up to a size threshold
(:mod:`services.ingestion.search`). That scan costs what it reads: each chunk's row, about
2 KB (a 1,536-byte ``vector(384)`` stored in the row, its text and its ``tsvector``), of
which it needs the vector and four small columns. This migration gives the scan a narrow,
tenant-ordered structure of its own:

* ``kb_chunks.embedding_half``: ``embedding`` as ``halfvec(384)`` (16-bit floats, 776
  bytes), a stored generated column, so every writer keeps writing ``embedding`` alone;
  its storage stays pgvector's default (``EXTERNAL``), so it goes out of line and the heap
  row keeps its size;
* ``ix_kb_chunks_scan``: a B-tree on ``(organization_id, knowledge_base_id)`` that carries
  ``id``, ``document_id``, ``audience`` and ``embedding_half``, so the scan is an
  index-only scan over ~830 bytes a chunk, the tenant's entries side by side.

The scan ranks by the half-precision distance, then re-ranks a shortlist by the exact
``embedding`` distance, so its answer is the full-precision ranking. ``embedding`` itself,
its HNSW index and ``ix_kb_chunks_organization_id_knowledge_base_id`` are unchanged.

Only where ``embedding`` is a pgvector ``vector`` and pgvector has ``halfvec`` (0.7 and
later); elsewhere (the ``float8[]`` fallback) nothing changes. Adding a stored column
rewrites ``kb_chunks`` and rebuilds its indexes (HNSW included): on a large table run it
in a maintenance window. A new embedding dimension needs a migration changing both columns.

Revision ID: api2_0006
Revises: api2_0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "api2_0006"
down_revision: str | Sequence[str] | None = "api2_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "api2"
DIMENSIONS = 384
SCAN_INDEX = "ix_kb_chunks_scan"


def _has_halfvec_vectors() -> bool:
    """Whether ``kb_chunks.embedding`` is a pgvector ``vector`` and ``halfvec`` exists."""
    if context.is_offline_mode():
        return True  # offline SQL is written for a production server, which has pgvector
    found = op.get_bind().execute(
        sa.text(
            "SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding' "
            "AND NOT a.attisdropped AND t.typname = 'vector' "
            "AND to_regtype('halfvec') IS NOT NULL"
        ),
        {"table": f"{SCHEMA}.kb_chunks"},
    )
    return found.first() is not None


def upgrade() -> None:
    if not _has_halfvec_vectors():
        return
    op.execute(
        f"ALTER TABLE {SCHEMA}.kb_chunks ADD COLUMN embedding_half halfvec({DIMENSIONS}) "
        f"GENERATED ALWAYS AS (embedding::halfvec({DIMENSIONS})) STORED"
    )
    op.execute(
        f"CREATE INDEX {SCAN_INDEX} ON {SCHEMA}.kb_chunks (organization_id, knowledge_base_id) "
        "INCLUDE (id, document_id, audience, embedding_half)"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {SCHEMA}.{SCAN_INDEX}")
    op.execute(f"ALTER TABLE {SCHEMA}.kb_chunks DROP COLUMN IF EXISTS embedding_half")
