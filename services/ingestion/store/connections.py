"""Connections (an organization's encrypted credentials for a provider) and bindings (a base,
or one document, bound to a connection), scoped to their organization like the rest.

Credentials arrive here already sealed (``shared.credentials``); this module
stores the token and the credential *names*, and reads the token back only for a sync
(:func:`sealed_credentials`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.ingestion.store.documents import get_document
from services.ingestion.store.knowledge_bases import get_knowledge_base
from services.ingestion.store.names import checked_name
from services.ingestion.store.paging import keyset_page
from shared.db.base import utcnow
from shared.db.models.kb_connectors import KbConnection, KbConnectorBinding
from shared.db.tenant import select_scoped
from shared.errors import RecordMissing, SpeedtierError, Unrecoverable


class ConnectionInUse(SpeedtierError):
    """A connection still has bindings (409): unbind first."""


class ConnectionNameTaken(SpeedtierError):
    """The organization already has a connection of that provider and name (409)."""


# -- connections -------------------------------------------------------------------------


def create_connection(
    session: Session,
    *,
    organization_id: int,
    provider: str,
    name: str,
    sealed: bytes,
    credential_fields: Sequence[str],
    settings: dict[str, Any],
    now: datetime | None = None,
) -> KbConnection:
    """A new connection (flushed). Raises ConnectionNameTaken."""
    now = now or utcnow()
    row = KbConnection(
        organization_id=organization_id,
        provider=provider,
        name=checked_name(name),
        credentials=sealed,
        credential_fields=sorted(credential_fields),
        settings=settings,
        created_at=now,
        updated_at=now,
    )
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        raise ConnectionNameTaken(f"a {provider} connection named {name!r} exists") from None
    return row


def get_connection(
    session: Session, *, organization_id: int, connection_id: int, for_update: bool = False
) -> KbConnection:
    """The organization's connection. Raises RecordMissing (missing or another tenant's)."""
    statement = select_scoped(KbConnection, organization_id=organization_id).where(
        KbConnection.id == connection_id
    )
    if for_update:
        statement = statement.with_for_update()
    found = session.execute(statement).scalar_one_or_none()
    if found is None:
        raise RecordMissing(f"connection {connection_id} not found")
    return found


def sealed_credentials(session: Session, *, organization_id: int, connection_id: int) -> bytes:
    """The connection's sealed credentials (for a sync, which opens them)."""
    token = session.execute(
        select(KbConnection.credentials).where(
            KbConnection.organization_id == organization_id, KbConnection.id == connection_id
        )
    ).scalar_one_or_none()
    if token is None:
        raise RecordMissing(f"connection {connection_id} not found")
    return bytes(token)


def list_connections(
    session: Session, *, organization_id: int, limit: int = 100, after_id: int | None = None
) -> list[KbConnection]:
    statement = select_scoped(KbConnection, organization_id=organization_id)
    return keyset_page(session, statement, KbConnection.id, limit=limit, after_id=after_id)


def update_connection(
    session: Session,
    *,
    organization_id: int,
    connection_id: int,
    sealed: bytes | None = None,
    credential_fields: Sequence[str] = (),
    settings: dict[str, Any] | None = None,
    name: str | None = None,
    now: datetime | None = None,
) -> KbConnection:
    """Replace the credentials (and settings, name) of a connection. Raises RecordMissing,
    ConnectionNameTaken."""
    row = get_connection(
        session, organization_id=organization_id, connection_id=connection_id, for_update=True
    )
    if sealed is not None:
        row.credentials = sealed
        row.credential_fields = sorted(credential_fields)
    if settings is not None:
        row.settings = settings
    if name is not None:
        row.name = checked_name(name)
    row.updated_at = now or utcnow()
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        raise ConnectionNameTaken(f"a {row.provider} connection named {name!r} exists") from None
    return row


def delete_connection(session: Session, *, organization_id: int, connection_id: int) -> None:
    """Delete a connection and its sealed credentials. Raises RecordMissing, ConnectionInUse
    (bindings still use it)."""
    row = get_connection(
        session, organization_id=organization_id, connection_id=connection_id, for_update=True
    )
    bound = session.scalar(
        select(func.count()).where(
            KbConnectorBinding.organization_id == organization_id,
            KbConnectorBinding.connection_id == connection_id,
        )
    )
    if bound:
        raise ConnectionInUse(f"connection {connection_id} still has {bound} binding(s)")
    session.delete(row)
    session.flush()


def rotate_all(
    session: Session,
    rotate: Callable[[bytes], bytes],
    *,
    organization_id: int | None = None,
    batch: int = 500,
) -> tuple[int, list[int]]:
    """Re-seal every stored token (of one organization, or of all: key rotation) with
    ``rotate(token) -> token``; returns how many were re-sealed and the ids of the
    connections whose token ``rotate`` could not open (left as they are). The caller
    commits."""
    count, unreadable = 0, list[int]()
    after = 0
    while True:
        statement = select(KbConnection.id, KbConnection.credentials).where(KbConnection.id > after)
        if organization_id is not None:
            statement = statement.where(KbConnection.organization_id == organization_id)
        rows = session.execute(
            statement.order_by(KbConnection.id).limit(batch).with_for_update()
        ).all()
        if not rows:
            return count, unreadable
        for ident, token in rows:
            try:
                sealed = rotate(bytes(token))
            except Unrecoverable:
                unreadable.append(ident)
                continue
            session.execute(
                update(KbConnection).where(KbConnection.id == ident).values(credentials=sealed),
                execution_options={"synchronize_session": False},
            )
            count += 1
        after = rows[-1][0]


# -- bindings ----------------------------------------------------------------------------


def create_binding(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    connection_id: int,
    settings: dict[str, Any],
    item_id: str | None = None,
    document_id: int | None = None,
    audience: Sequence[str] = (),
    now: datetime | None = None,
) -> KbConnectorBinding:
    """Bind a base (or, with ``item_id``, one document) to a connection, due for a sync now
    (flushed). Raises RecordMissing for a missing base, connection or document."""
    now = now or utcnow()
    get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    connection = get_connection(
        session, organization_id=organization_id, connection_id=connection_id
    )
    if document_id is not None:
        get_document(
            session,
            organization_id=organization_id,
            document_id=document_id,
            knowledge_base_id=knowledge_base_id,
        )
    row = KbConnectorBinding(
        organization_id=organization_id,
        knowledge_base_id=knowledge_base_id,
        connection_id=connection_id,
        provider=connection.provider,
        item_id=item_id,
        document_id=document_id,
        settings=settings,
        audience=sorted(set(audience)),
        next_sync_at=now,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_binding(
    session: Session,
    *,
    organization_id: int,
    binding_id: int,
    knowledge_base_id: int | None = None,
    for_update: bool = False,
) -> KbConnectorBinding:
    """The binding (of ``knowledge_base_id`` when given). Raises RecordMissing."""
    statement = select_scoped(KbConnectorBinding, organization_id=organization_id).where(
        KbConnectorBinding.id == binding_id
    )
    if knowledge_base_id is not None:
        statement = statement.where(KbConnectorBinding.knowledge_base_id == knowledge_base_id)
    if for_update:
        statement = statement.with_for_update()
    found = session.execute(
        statement.execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if found is None:
        raise RecordMissing(f"binding {binding_id} not found")
    return found


def list_bindings(
    session: Session, *, organization_id: int, knowledge_base_id: int
) -> list[KbConnectorBinding]:
    """A live base's bindings by id. Raises RecordMissing for a missing base."""
    get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    statement = select_scoped(KbConnectorBinding, organization_id=organization_id).where(
        KbConnectorBinding.knowledge_base_id == knowledge_base_id
    )
    return list(session.scalars(statement.order_by(KbConnectorBinding.id)))


def delete_binding(
    session: Session, *, organization_id: int, binding_id: int, knowledge_base_id: int
) -> None:
    """Unbind (its item rows go with it; its documents stay, no longer synced)."""
    row = get_binding(
        session,
        organization_id=organization_id,
        binding_id=binding_id,
        knowledge_base_id=knowledge_base_id,
        for_update=True,
    )
    session.delete(row)
    session.flush()
