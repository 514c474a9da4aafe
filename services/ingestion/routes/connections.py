"""Connection routes: an organization's provider credentials, stored encrypted (create,
list, read, replace, delete); no answer carries a credential, only the fields' names."""

from __future__ import annotations

from typing import Any

from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_fields, parse_json
from services.ingestion import store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.connector_schemas import (
    ConnectionCreate,
    ConnectionOut,
    ConnectionPage,
    ConnectionUpdate,
    checked,
    checked_host,
    fitted,
)
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import (
    AUTH,
    MISSING,
    answer,
    components,
    next_after,
    query_args,
    request_session,
)
from services.ingestion.schemas import PageQuery

CONFLICT: dict[int, Any] = {
    409: ("A connection of that provider and name exists, or bindings still use it.", ErrorBody)
}
UPDATE_CONFLICT: dict[int, Any] = {
    409: (
        "A connection of that provider and name exists; or a credential or setting does not "
        "fit the stored connection's provider (`conflicting_fields`, `fields` naming each).",
        ErrorBody,
    )
}
NO_KEY: dict[int, Any] = {
    503: ("No credentials key is configured (SPEEDTIER_CONNECTOR_CREDENTIALS_KEY).", ErrorBody)
}


@describe(
    "Store a provider connection's credentials",
    description="The credentials are encrypted at rest (Fernet, a key from the deployment's "
    "environment) and never returned: answers show only their field names.",
    body=ConnectionCreate,
    responses={201: ("The connection.", ConnectionOut), **AUTH, **CONFLICT, **NO_KEY},
)
def create_connection() -> ResponseReturnValue:
    body = parse_json(ConnectionCreate, json_body())
    parts = components()
    connector = parts.connectors[body.provider]
    credentials = checked(connector, connector.credentials_model, body.credentials, "credentials")
    settings = checked(connector, connector.connection_model, body.settings, "settings")
    checked_host(connector, settings, "settings")
    sealed = parts.credentials.seal(credentials)
    with request_session() as session:
        row = store.create_connection(
            session,
            organization_id=current_organization_id(),
            provider=body.provider,
            name=body.name,
            sealed=sealed,
            credential_fields=list(credentials),
            settings=settings,
        )
        session.commit()
        created = ConnectionOut.of(row)
    return answer(created, 201, f"/connections/{created.id}")


@describe(
    "List connections",
    query=PageQuery,
    responses={200: ("A page of connections, by id.", ConnectionPage), **AUTH},
)
def list_connections() -> ResponseReturnValue:
    query = parse_fields(PageQuery, query_args())
    with request_session() as session:
        rows = store.list_connections(
            session,
            organization_id=current_organization_id(),
            limit=query.limit,
            after_id=query.after,
        )
        found = [ConnectionOut.of(row) for row in rows]
    return answer(ConnectionPage(connections=found, next_after=next_after(found, query.limit)))


@describe(
    "A connection (without its credentials)",
    responses={200: ("The connection.", ConnectionOut), **AUTH, **MISSING},
)
def get_connection(connection_id: int) -> ResponseReturnValue:
    with request_session() as session:
        row = store.get_connection(
            session, organization_id=current_organization_id(), connection_id=connection_id
        )
        found = ConnectionOut.of(row)
    return answer(found)


@describe(
    "Replace a connection's credentials, settings or name",
    description="Credentials given replace the stored ones as a whole (a rotated token, "
    "say); the next sync of every binding uses them. The body names no provider, so the "
    "document lists every provider's fields; those of another provider than the stored "
    "connection's answer 409 `conflicting_fields`.",
    body=ConnectionUpdate,
    responses={
        200: ("The connection.", ConnectionOut),
        **AUTH,
        **MISSING,
        **UPDATE_CONFLICT,
        **NO_KEY,
    },
)
def update_connection(connection_id: int) -> ResponseReturnValue:
    body = parse_json(ConnectionUpdate, json_body())
    parts = components()
    organization_id = current_organization_id()
    with request_session() as session:
        row = store.get_connection(
            session, organization_id=organization_id, connection_id=connection_id
        )
        connector = parts.connectors[row.provider]
        credentials = settings = None
        if body.credentials is not None:
            credentials = fitted(
                connector, connector.credentials_model, body.credentials, "credentials"
            )
        if body.settings is not None:
            settings = fitted(connector, connector.connection_model, body.settings, "settings")
            checked_host(connector, settings, "settings")
        row = store.update_connection(
            session,
            organization_id=organization_id,
            connection_id=connection_id,
            sealed=parts.credentials.seal(credentials) if credentials is not None else None,
            credential_fields=list(credentials or {}),
            settings=settings,
            name=body.name,
        )
        session.commit()
        found = ConnectionOut.of(row)
    return answer(found)


@describe(
    "Delete a connection and its credentials",
    description="Refused (409) while a binding uses it: unbind first.",
    responses={204: ("Deleted.", None), **AUTH, **MISSING, **CONFLICT},
)
def delete_connection(connection_id: int) -> ResponseReturnValue:
    with request_session() as session:
        store.delete_connection(
            session, organization_id=current_organization_id(), connection_id=connection_id
        )
        session.commit()
    return "", 204
