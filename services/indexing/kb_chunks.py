"""The api2 ``kb_chunks`` target: a knowledge-base document's chunk set, replaced whole.

Ingestion (seed 003) decides when a document's chunks change; this writes them. The delete
and the insert run in the caller's transaction, which holds the document's row lock, so
concurrent replacements of one document serialise; the caller commits, and a reader sees
the old chunk set or the new one, never half of either. A caller that deletes the old set
in a statement of its own (ingestion folds it into the one that marks the document ready)
writes the new one with :func:`copy_kb_chunks`.

The new rows go in with one binary ``COPY`` on the session's own connection (so in its
transaction), not as an ``INSERT`` per row: the server skips a statement's set-up per row,
and neither side turns 384 floats into text and back. Rows are encoded as the copy streams
them, so a large document's memory stays flat (psycopg sends its buffer every 32 KiB).
The server fills what it always does: the identity ``id``, the generated ``content_tsv``
and ``embedding_half``, and every index; the foreign key to the document is checked.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from services.indexing.chunk_batches import PackedVector
from services.indexing.chunking import Chunk
from services.indexing.embedders import Embedder
from shared.db.base import API2_SCHEMA
from shared.db.driver import as_sqlalchemy_errors, driver_connection
from shared.db.models.ingestion import KbChunk
from shared.db.vector import embedding_storage
from shared.errors import Unrecoverable

#: What a chunk set writes, in the order of each copied row.
COPY_COLUMNS = (
    "organization_id",
    "knowledge_base_id",
    "document_id",
    "position",
    "content",
    "token_count",
    "embedding",
    "audience",
    "created_at",
)
COPY_STATEMENT = (
    f"COPY {API2_SCHEMA}.{KbChunk.__tablename__} ({', '.join(COPY_COLUMNS)}) "
    "FROM STDIN (FORMAT BINARY)"
)
_TYPES_BEFORE_EMBEDDING = ["int8", "int8", "int8", "int4", "text", "int4"]
_TYPES_AFTER_EMBEDDING = ["text[]", "timestamptz"]


def check_embedding_dimensions(session: Session, embedder: Embedder) -> None:
    """Raise Unrecoverable when ``kb_chunks.embedding`` cannot hold ``embedder``'s vectors
    (a pgvector column of another dimension: a migration must change it first)."""
    storage = embedding_storage(session)
    if storage.dims is not None and storage.dims != embedder.dimensions:
        raise Unrecoverable(
            f"embedder {embedder.name} makes {embedder.dimensions}-dimensional vectors but "
            f"kb_chunks.embedding is vector({storage.dims}); a migration must change it"
        )


def replace_kb_chunks(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    document_id: int,
    chunks: Sequence[Chunk],
    vectors: Sequence[PackedVector],
    audience: list[str],
    created_at: datetime,
) -> None:
    """Make ``chunks`` (with their ``vectors``, in order) the document's chunk set, in the
    caller's transaction; the caller holds the document's lock and commits.

    Raises:
      ValueError: ``created_at`` is naive (a binary copy cannot say which zone it is in).
      IntegrityError: no such document in this organization (the foreign key).
    """
    if created_at.tzinfo is None:
        raise ValueError("created_at must be timezone-aware")
    session.execute(
        delete(KbChunk).where(
            KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
        ),
        execution_options={"synchronize_session": False},
    )
    copy_kb_chunks(
        session,
        organization_id=organization_id,
        knowledge_base_id=knowledge_base_id,
        document_id=document_id,
        chunks=chunks,
        vectors=vectors,
        audience=audience,
        created_at=created_at,
    )


def copy_kb_chunks(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    document_id: int,
    chunks: Sequence[Chunk],
    vectors: Sequence[PackedVector],
    audience: list[str],
    created_at: datetime,
) -> None:
    """Add ``chunks`` (with their ``vectors``, in order) to the document's chunks with one
    binary ``COPY``, in the caller's transaction: :func:`replace_kb_chunks` without its
    delete, for a caller that deleted the previous chunk set in a statement of its own
    (under the document's lock, in the same transaction).

    Raises:
      ValueError: ``created_at`` is naive.
      IntegrityError: no such document in this organization (the foreign key), or a
        position the document already has.
    """
    if created_at.tzinfo is None:
        raise ValueError("created_at must be timezone-aware")
    if not chunks:
        return
    encode: Callable[[PackedVector], object]
    if embedding_storage(session).is_pgvector:
        embedding_type, encode = "bytea", vector_binary
    else:
        embedding_type, encode = "float8[]", list
    types = [*_TYPES_BEFORE_EMBEDDING, embedding_type, *_TYPES_AFTER_EMBEDDING]
    connection = driver_connection(session)
    with (
        as_sqlalchemy_errors(COPY_STATEMENT, None),
        connection.cursor() as cursor,
        cursor.copy(COPY_STATEMENT) as copy,
    ):
        copy.set_types(types)
        for chunk, vector in zip(chunks, vectors, strict=True):
            copy.write_row(
                (
                    organization_id,
                    knowledge_base_id,
                    document_id,
                    chunk.position,
                    chunk.content,
                    chunk.token_count,
                    encode(vector),
                    audience,
                    created_at,
                )
            )


def vector_binary(vector: PackedVector) -> bytes:
    """``vector`` in pgvector's binary form (what its ``vector_recv`` reads: the dimension
    and an unused word as 16-bit integers, then each value as a 32-bit float, big-endian).

    A binary ``COPY`` carries no type per field: the server reads the field with the
    column's own receive function, so these bytes go out under psycopg's ``bytea`` dumper,
    which sends them as they are. Each value is rounded to 32 bits the way pgvector's
    ``float8[]`` to ``vector`` cast rounds it, so the stored vector is the one an INSERT of
    the same floats stores.
    """
    values = array("f", vector)
    if sys.byteorder == "little":
        values.byteswap()
    return len(values).to_bytes(2, "big") + b"\x00\x00" + values.tobytes()
