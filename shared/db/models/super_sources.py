"""Super sources (seed 004): connections, import checkpoints and indexed nodes, in ``api2``.

* ``super_source_connections``: one organization's connection to a source (GitHub, Linear,
  ...), with the knowledge base its nodes are indexed into. Its secrets are sealed with the
  same key ring as knowledge-base connections (``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``,
  ``shared.credentials``): ``sealed_credentials`` (a Fernet token of the credentials' JSON
  object) and ``sealed_webhook_secret`` (a Fernet token of the secret a provider's webhook
  signature is made with). The plain ``credentials`` (JSONB) and ``webhook_secret`` columns
  stay readable for a row a peer wrote plain (a previous release during a rolling deploy,
  Rails); ``speedtier super seal-credentials`` seals them. ``webhook_key`` is what a
  provider's webhook names the connection by (a repository's full name, a Linear
  organization id).
* ``super_source_imports``: one root's walk (the seed's ``progress``): the connector's
  opaque checkpoint after the last page whose index jobs were enqueued, so a killed import
  resumes there; ``since`` is the walk's start (the previous complete walk's
  ``watermark``: an incremental walk lists only what changed after it).
* ``super_source_nodes``: one indexed node: its provider ``synchronization_date`` (an index
  job skips a node that is not newer) and the ``kb_documents`` row its text is indexed as.

Every table is tenant-keyed: children refer to their connection through
``(organization_id, id)``, so no row can point at another organization's connection.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Api2Base, utcnow


def _created_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), default=utcnow)


def _updated_at() -> Mapped[datetime]:
    return mapped_column(
        DateTime(timezone=True), server_default=func.now(), default=utcnow, onupdate=utcnow
    )


class SuperSourceConnection(Api2Base):
    """An organization's connection to a source; its nodes go to ``knowledge_base_id``."""

    __tablename__ = "super_source_connections"
    __table_args__ = (
        UniqueConstraint("organization_id", "id"),
        ForeignKeyConstraint(
            ["organization_id", "knowledge_base_id"],
            ["knowledge_bases.organization_id", "knowledge_bases.id"],
            name="fk_super_source_connections_knowledge_base",
        ),
        Index(
            "uq_super_source_connections_webhook_key",
            "source",
            "webhook_key",
            unique=True,
            postgresql_where=text("webhook_key IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(Text)
    knowledge_base_id: Mapped[int] = mapped_column(BigInteger)
    base_url: Mapped[str | None] = mapped_column(Text)
    credentials: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    webhook_key: Mapped[str | None] = mapped_column(Text)
    webhook_secret: Mapped[str | None] = mapped_column(Text)
    sealed_credentials: Mapped[bytes | None] = mapped_column(LargeBinary)
    sealed_webhook_secret: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class SuperSourceImport(Api2Base):
    """One root's walk: its checkpoint (None: start over or complete), and its counts."""

    __tablename__ = "super_source_imports"
    __table_args__ = (
        ForeignKeyConstraint(
            ["organization_id", "connection_id"],
            ["super_source_connections.organization_id", "super_source_connections.id"],
            name="fk_super_source_imports_connection",
            ondelete="CASCADE",
        ),
    )

    organization_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    connection_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    root_node_type: Mapped[str] = mapped_column(Text, primary_key=True)
    root_node_id: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint: Mapped[str | None] = mapped_column(Text)
    since: Mapped[str | None] = mapped_column(Text)
    watermark: Mapped[str | None] = mapped_column(Text)
    pages: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    nodes_scheduled: Mapped[int] = mapped_column(BigInteger, server_default=text("0"), default=0)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = _updated_at()


class SuperSourceNode(Api2Base):
    """One indexed node: the provider's synchronization date and its knowledge document."""

    __tablename__ = "super_source_nodes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["organization_id", "connection_id"],
            ["super_source_connections.organization_id", "super_source_connections.id"],
            name="fk_super_source_nodes_connection",
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["organization_id", "document_id"],
            ["kb_documents.organization_id", "kb_documents.id"],
            name="fk_super_source_nodes_document",
        ),
    )

    organization_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    connection_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node_type: Mapped[str] = mapped_column(Text, primary_key=True)
    node_id: Mapped[str] = mapped_column(Text, primary_key=True)
    document_id: Mapped[int | None] = mapped_column(BigInteger)
    synchronization_date: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    content_hash: Mapped[str | None] = mapped_column(String(64))
    indexed_at: Mapped[datetime] = _created_at()
