"""Knowledge-base connectors (seed 003): an organization's connections to a provider, what
each knowledge base (or single document) is bound to, and the provider items a binding
has landed as documents; all in ``api2``.

* ``kb_connections``: one organization's credentials for one provider (Notion, Confluence,
  Google Drive, SharePoint, Zendesk), **encrypted** (Fernet, key from
  ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``: ``shared.credentials``); only the
  names of the credential fields are readable without the key. ``settings`` holds what is
  not secret and belongs to the account (a Confluence site, a Zendesk subdomain).
* ``kb_connector_bindings``: a knowledge base bound to a connection with the provider
  scope in ``settings`` (a Drive, a SharePoint site, a Notion root page, Confluence spaces,
  Zendesk locales), or, with ``item_id``, a single document bound to one provider item.
  The sync's state lives here: the running pass (``checkpoint``, ``pass_mode``,
  ``pass_started_at``, ``pass_complete``), where the next incremental pass starts
  (``watermark``), and the freshness clock (``next_sync_at``, ``sync_failures``).
* ``kb_connector_items``: one provider item a binding landed: its document, the
  provider's modified time and a digest of what was landed (an unchanged item is not
  landed again), and when a pass last listed it (``listed_at``: a complete full pass
  removes the items it did not list).

Every table is tenant-keyed through ``(organization_id, id)`` foreign keys, as the
ingestion tables are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
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
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Api2Base, utcnow

#: The providers a knowledge base can be bound to (seed 003).
CONNECTOR_PROVIDERS = ("notion", "confluence", "google_drive", "sharepoint", "zendesk")
PASS_MODES = ("full", "incremental")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _created_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), default=utcnow)


def _updated_at() -> Mapped[datetime]:
    return mapped_column(
        DateTime(timezone=True), server_default=func.now(), default=utcnow, onupdate=utcnow
    )


class KbConnection(Api2Base):
    """An organization's credentials for one provider (encrypted)."""

    __tablename__ = "kb_connections"
    __table_args__ = (
        UniqueConstraint("organization_id", "id"),
        UniqueConstraint("organization_id", "provider", "name"),
        CheckConstraint(_in("provider", CONNECTOR_PROVIDERS), name="provider"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    provider: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    #: A Fernet token of the credentials' JSON object.
    credentials: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    #: The credentials' field names (never their values), for the API to show.
    credential_fields: Mapped[list[str]] = mapped_column(
        ARRAY(Text), server_default=text("'{}'::text[]"), default=list
    )
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class KbConnectorBinding(Api2Base):
    """A knowledge base (or, with ``item_id``, one document) bound to a connection."""

    __tablename__ = "kb_connector_bindings"
    __table_args__ = (
        UniqueConstraint("organization_id", "id"),
        ForeignKeyConstraint(
            ["organization_id", "knowledge_base_id"],
            ["knowledge_bases.organization_id", "knowledge_bases.id"],
            name="fk_kb_connector_bindings_knowledge_base",
        ),
        ForeignKeyConstraint(
            ["organization_id", "connection_id"],
            ["kb_connections.organization_id", "kb_connections.id"],
            name="fk_kb_connector_bindings_connection",
        ),
        ForeignKeyConstraint(
            ["organization_id", "document_id"],
            ["kb_documents.organization_id", "kb_documents.id"],
            name="fk_kb_connector_bindings_document",
        ),
        Index("ix_kb_connector_bindings_next_sync_at", "next_sync_at"),
        CheckConstraint(_in("provider", CONNECTOR_PROVIDERS), name="provider"),
        CheckConstraint(f"pass_mode IS NULL OR {_in('pass_mode', PASS_MODES)}", name="pass_mode"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    knowledge_base_id: Mapped[int] = mapped_column(BigInteger)
    connection_id: Mapped[int] = mapped_column(BigInteger)
    provider: Mapped[str] = mapped_column(Text)
    #: A single-item binding: the provider item, and the document it lands in.
    item_id: Mapped[str | None] = mapped_column(Text)
    document_id: Mapped[int | None] = mapped_column(BigInteger)
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), default=dict
    )
    audience: Mapped[list[str]] = mapped_column(
        ARRAY(Text), server_default=text("'{}'::text[]"), default=list
    )
    checkpoint: Mapped[str | None] = mapped_column(Text)
    pass_mode: Mapped[str | None] = mapped_column(Text)
    pass_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pass_complete: Mapped[bool] = mapped_column(Boolean, server_default=text("true"), default=True)
    watermark: Mapped[str | None] = mapped_column(Text)
    last_synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    sync_failures: Mapped[int] = mapped_column(Integer, server_default=text("0"), default=0)
    next_sync_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class KbConnectorItem(Api2Base):
    """One provider item a binding landed as a document."""

    __tablename__ = "kb_connector_items"
    __table_args__ = (
        ForeignKeyConstraint(
            ["organization_id", "binding_id"],
            ["kb_connector_bindings.organization_id", "kb_connector_bindings.id"],
            name="fk_kb_connector_items_binding",
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["organization_id", "document_id"],
            ["kb_documents.organization_id", "kb_documents.id"],
            name="fk_kb_connector_items_document",
        ),
        Index("ix_kb_connector_items_binding_id_listed_at", "binding_id", "listed_at"),
    )

    binding_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    external_id: Mapped[str] = mapped_column(Text, primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    document_id: Mapped[int | None] = mapped_column(BigInteger)
    modified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    content_digest: Mapped[str | None] = mapped_column(String(64))
    listed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()
