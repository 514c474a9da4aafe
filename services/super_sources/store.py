"""All of the super sources' SQL: connections, import checkpoints, indexed nodes and the
knowledge documents their text is searchable as.

Every statement on tenant data filters on the organization, except
:func:`connection_for_webhook`: a public webhook names its connection, not its
organization, and the connection's organization is what scopes everything after it; and
:func:`plain_secret_connections`, the operator's sealing of every tenant's plain secrets.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.connectors.nodes import NodeRef
from services.super_sources.connection_secrets import seal_into
from shared.credentials import CredentialBox
from shared.db.models.ingestion import KbChunk, KbDocument, KnowledgeBase
from shared.db.models.super_sources import (
    SuperSourceConnection,
    SuperSourceImport,
    SuperSourceNode,
)
from shared.db.tenant import require_scoped, select_scoped

# -- connections --------------------------------------------------------------------------------


def connection(session: Session, organization_id: int, connection_id: int) -> SuperSourceConnection:
    """The organization's connection; RecordMissing when missing or another's."""
    return require_scoped(
        session, SuperSourceConnection, connection_id, organization_id=organization_id
    )


def connection_for_webhook(
    session: Session, source: str, connection_id: int | None, webhook_key: str | None
) -> SuperSourceConnection | None:
    """The connection a webhook is for: by id (the URL's ``?connection=``) or by the root
    its payload names (``webhook_key``), of ``source`` either way."""
    statement = select(SuperSourceConnection).where(SuperSourceConnection.source == source)
    if connection_id is not None:
        statement = statement.where(SuperSourceConnection.id == connection_id)
    elif webhook_key is not None:
        statement = statement.where(SuperSourceConnection.webhook_key == webhook_key)
    else:
        return None
    return session.execute(statement).scalar_one_or_none()


def create_connection(
    session: Session,
    organization_id: int,
    source: str,
    *,
    box: CredentialBox,
    credentials: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    base_url: str | None = None,
    webhook_key: str | None = None,
    webhook_secret: str | None = None,
) -> SuperSourceConnection:
    """A connection with its own knowledge base (``super:<source>``), flushed; its
    credentials and webhook secret sealed with ``box``.

    Raises:
      CredentialsKeyMissing: a secret to store and no key configured.
    """
    base = KnowledgeBase(organization_id=organization_id, name=f"super:{source}")
    session.add(base)
    session.flush()
    row = SuperSourceConnection(
        organization_id=organization_id,
        source=source,
        knowledge_base_id=base.id,
        base_url=base_url,
        settings=settings or {},
        webhook_key=webhook_key,
    )
    seal_into(row, box, credentials=credentials, webhook_secret=webhook_secret)
    session.add(row)
    session.flush()
    return row


def plain_secret_connections(session: Session) -> Sequence[SuperSourceConnection]:
    """Every organization's connections that still hold a plain secret, locked."""
    plain = or_(
        SuperSourceConnection.credentials != text("'{}'::jsonb"),
        SuperSourceConnection.webhook_secret.is_not(None),
    )
    statement = select(SuperSourceConnection).where(plain).with_for_update()
    return session.execute(statement).scalars().all()


# -- import checkpoints -------------------------------------------------------------------------


def locked_import(
    session: Session, organization_id: int, connection_id: int, root: NodeRef
) -> SuperSourceImport:
    """The root's import row, created when missing, locked until the transaction ends (a
    second import of the same root, should one ever run, waits instead of interleaving)."""
    key = {
        "organization_id": organization_id,
        "connection_id": connection_id,
        "root_node_type": root.node_type,
        "root_node_id": root.node_id,
    }
    session.execute(insert(SuperSourceImport).values(**key).on_conflict_do_nothing())
    statement = select_scoped(SuperSourceImport, organization_id=organization_id).filter_by(**key)
    return session.execute(statement.with_for_update()).scalar_one()


def imports(session: Session, organization_id: int) -> Sequence[SuperSourceImport]:
    statement = select_scoped(SuperSourceImport, organization_id=organization_id)
    return session.execute(statement).scalars().all()


# -- indexed nodes ------------------------------------------------------------------------------


def locked_node(
    session: Session, organization_id: int, connection_id: int, ref: NodeRef
) -> SuperSourceNode | None:
    """The node's indexed row, locked (two index jobs of one node serialise), or None."""
    statement = (
        select_scoped(SuperSourceNode, organization_id=organization_id)
        .filter_by(connection_id=connection_id, node_type=ref.node_type, node_id=ref.node_id)
        .with_for_update()
    )
    return session.execute(statement).scalar_one_or_none()


def indexed_date(
    session: Session, organization_id: int, connection_id: int, ref: NodeRef
) -> datetime | None:
    """The synchronization date the node was indexed at, without a lock."""
    statement = (
        select_scoped(SuperSourceNode, organization_id=organization_id)
        .filter_by(connection_id=connection_id, node_type=ref.node_type, node_id=ref.node_id)
        .with_only_columns(SuperSourceNode.synchronization_date)
    )
    return session.execute(statement).scalar_one_or_none()


def lock_node_key(session: Session, organization_id: int, connection_id: int, ref: NodeRef) -> None:
    """Serialise first-time indexers of a node that has no row yet (transaction lock)."""
    name = f"super:{organization_id}:{connection_id}:{ref.node_type}:{ref.node_id}"
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(name, 0))))


def save_document(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    document_id: int | None,
    name: str,
    url: str | None,
    connector: str,
    content_hash: str,
    fingerprint: str,
    now: datetime,
) -> int:
    """Create or update the node's ready knowledge document; its id."""
    if document_id is not None:
        session.execute(
            update(KbDocument)
            .where(KbDocument.organization_id == organization_id, KbDocument.id == document_id)
            .values(
                name=name,
                url=url,
                content_hash=content_hash,
                index_fingerprint=fingerprint,
                status="ready",
                ready_at=now,
                last_fetched_at=now,
                deleted_at=None,
            )
        )
        return document_id
    document = KbDocument(
        organization_id=organization_id,
        knowledge_base_id=knowledge_base_id,
        name=name,
        kind="text",
        status="ready",
        url=url,
        connector=connector,
        content_hash=content_hash,
        index_fingerprint=fingerprint,
        current_version=1,
        ready_at=now,
        last_fetched_at=now,
    )
    session.add(document)
    session.flush()
    return document.id


def save_node(
    session: Session,
    *,
    organization_id: int,
    connection_id: int,
    ref: NodeRef,
    document_id: int | None,
    synchronization_date: datetime,
    content_hash: str | None,
    now: datetime,
) -> None:
    values = {
        "document_id": document_id,
        "synchronization_date": synchronization_date,
        "content_hash": content_hash,
        "indexed_at": now,
    }
    session.execute(
        insert(SuperSourceNode)
        .values(
            organization_id=organization_id,
            connection_id=connection_id,
            node_type=ref.node_type,
            node_id=ref.node_id,
            **values,
        )
        .on_conflict_do_update(
            index_elements=["organization_id", "connection_id", "node_type", "node_id"],
            set_=values,
        )
    )


def remove_document(
    session: Session, organization_id: int, document_id: int, now: datetime
) -> None:
    """The node is gone at its provider: its chunks go and its document is marked deleted."""
    session.execute(
        delete(KbChunk).where(
            KbChunk.organization_id == organization_id, KbChunk.document_id == document_id
        ),
        execution_options={"synchronize_session": False},
    )
    session.execute(
        update(KbDocument)
        .where(KbDocument.organization_id == organization_id, KbDocument.id == document_id)
        .values(deleted_at=now)
    )


def delete_node(session: Session, organization_id: int, connection_id: int, ref: NodeRef) -> None:
    session.execute(
        delete(SuperSourceNode).where(
            SuperSourceNode.organization_id == organization_id,
            SuperSourceNode.connection_id == connection_id,
            SuperSourceNode.node_type == ref.node_type,
            SuperSourceNode.node_id == ref.node_id,
        )
    )


def node_counts(session: Session, organization_id: int) -> dict[int, int]:
    """Indexed nodes per connection of the organization."""
    statement = (
        select(SuperSourceNode.connection_id, func.count())
        .where(SuperSourceNode.organization_id == organization_id)
        .group_by(SuperSourceNode.connection_id)
    )
    return {int(conn): int(count) for conn, count in session.execute(statement).all()}
