"""The api2 ``kb_chunks`` target: a knowledge-base document's chunk set, replaced whole.

Ingestion (seed 003) decides when a document's chunks change; this writes them. The delete
and the insert run in the caller's transaction, which holds the document's row lock, so
concurrent replacements of one document serialise; the caller commits, and a reader sees
the old chunk set or the new one, never half of either.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from services.indexing.chunk_batches import PackedVector, insert_in_batches
from services.indexing.chunking import Chunk
from services.indexing.embedders import Embedder
from shared.db.models.ingestion import KbChunk
from shared.db.vector import embedding_storage
from shared.errors import Unrecoverable


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
    caller's transaction; the caller holds the document's lock and commits."""
    session.execute(
        delete(KbChunk).where(
            KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
        ),
        execution_options={"synchronize_session": False},
    )
    insert_in_batches(
        session,
        insert(KbChunk),
        (
            {
                "organization_id": organization_id,
                "knowledge_base_id": knowledge_base_id,
                "document_id": document_id,
                "position": chunk.position,
                "content": chunk.content,
                "token_count": chunk.token_count,
                "embedding": vector,
                "audience": audience,
                "created_at": created_at,
            }
            for chunk, vector in zip(chunks, vectors, strict=True)
        ),
    )
