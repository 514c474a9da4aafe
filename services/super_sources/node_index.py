"""The index unit: make one node's current text searchable, once per change.

==========================================  ===============================================
the node                                    what happens (counter)
==========================================  ===============================================
listed with a date not newer than indexed   nothing, not even a provider call
                                            (``already_indexed``)
fetched, not newer than indexed             nothing written (``already_indexed``)
fetched, newer (or never indexed)           its title and text chunked, embedded and written
                                            as its ``kb_documents`` row's chunk set
                                            (``indexation``)
gone at the provider (404)                  its chunks removed, its document marked deleted
                                            (``removed``)
==========================================  ===============================================

Text goes to ``api2.kb_chunks`` under a knowledge document of the connection's knowledge
base, so ``services.ingestion.search`` finds it per organization like any document.
Embedding happens before any lock; then, under the node's lock, the date is checked again,
so two index jobs of one node (an import's and a webhook's) write it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from services.connectors.nodes import Node, NodeRef
from services.indexing.chunk_batches import PackedVector, embed_chunks
from services.indexing.chunking import Chunk
from services.indexing.digests import content_hash
from services.indexing.index_writer import index_fingerprint, search_content
from services.indexing.kb_chunks import replace_kb_chunks
from services.super_sources import store
from services.super_sources.context import SuperContext
from shared.db.base import utcnow
from shared.db.engine import session_scope

INDEXED = "indexation"
ALREADY_INDEXED = "already_indexed"
REMOVED = "removed"


def index_node(
    sessions: sessionmaker[Session],
    ctx: SuperContext,
    *,
    organization_id: int,
    connection_id: int,
    ref: NodeRef,
    listed_date: datetime | None = None,
    webhook: bool = False,
) -> str:
    """Index ``ref`` when it changed; returns :data:`INDEXED`, :data:`ALREADY_INDEXED` or
    :data:`REMOVED` (and counts it as ``super.<source>.<outcome>``). ``webhook``: run by a
    webhook job, which may spend the quota its source keeps back for webhooks.

    Raises:
      RecordMissing: the connection is gone (or another organization's).
      Delay: the connection's quota is spent, or the provider said to wait.
      Unrecoverable / Retryable: from the connector or the embedder.
    """
    with session_scope(sessions) as session:
        row = store.connection(session, organization_id, connection_id)
        conn = ctx.connection(row)
        knowledge_base_id = row.knowledge_base_id
        indexed = store.indexed_date(session, organization_id, connection_id, ref)
    if listed_date is not None and indexed is not None and listed_date <= indexed:
        return _counted(ctx, conn.source, ALREADY_INDEXED)

    ctx.wait_for_quota(conn, webhook=webhook)
    node = ctx.entry(conn.source).connector.fetch(conn, ref)
    if node is not None and indexed is not None and node.synchronization_date <= indexed:
        return _counted(ctx, conn.source, ALREADY_INDEXED)
    prepared = _prepare(ctx, node) if node is not None else None

    with session_scope(sessions) as session:
        store.lock_node_key(session, organization_id, connection_id, ref)
        current = store.locked_node(session, organization_id, connection_id, ref)
        now = utcnow()
        if node is None or prepared is None:
            if current is not None:
                if current.document_id is not None:
                    store.remove_document(session, organization_id, current.document_id, now)
                store.delete_node(session, organization_id, connection_id, ref)
                session.commit()
            return _counted(ctx, conn.source, REMOVED)
        if current is not None and node.synchronization_date <= current.synchronization_date:
            return _counted(ctx, conn.source, ALREADY_INDEXED)  # a concurrent job won
        document_id = store.save_document(
            session,
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            document_id=current.document_id if current is not None else None,
            name=f"{ref.node_type}:{ref.node_id}"[:1000],
            url=node.url,
            connector=conn.source,
            content_hash=prepared.digest,
            fingerprint=index_fingerprint(ctx.chunker, ctx.embedder),
            now=now,
        )
        replace_kb_chunks(
            session,
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            document_id=document_id,
            chunks=prepared.chunks,
            vectors=prepared.vectors,
            audience=[],
            created_at=now,
        )
        store.save_node(
            session,
            organization_id=organization_id,
            connection_id=connection_id,
            ref=ref,
            document_id=document_id,
            synchronization_date=node.synchronization_date,
            content_hash=prepared.digest,
            now=now,
        )
        session.commit()
    return _counted(ctx, conn.source, INDEXED)


@dataclass(frozen=True)
class _Prepared:
    digest: str
    chunks: list[Chunk]
    vectors: list[PackedVector]


def _prepare(ctx: SuperContext, node: Node) -> _Prepared:
    """The node's chunks and vectors, computed before any lock is taken."""
    chunks = ctx.chunker.split(search_content(node.title, node.text))
    vectors = embed_chunks(ctx.embedder, chunks) if chunks else []
    return _Prepared(content_hash(node.title, node.text), chunks, vectors)


def _counted(ctx: SuperContext, source: str, outcome: str) -> str:
    ctx.count(source, outcome)
    return outcome
