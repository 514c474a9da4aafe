"""Binding routes: bind a base (or one document) to a connection, list and read its bindings,
unbind, and trigger a sync (``kb-connector-sync-<binding id>``, answered 202)."""

from __future__ import annotations

from typing import Any

from flask import request
from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_json
from services.ingestion import store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.connector_schemas import (
    BindingAccepted,
    BindingCreate,
    BindingList,
    BindingOut,
    DocumentBindingCreate,
    SyncBody,
    checked_item,
    fitted,
)
from services.ingestion.families import sync_job_id, sync_request
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import (
    AUTH,
    MISSING,
    QUEUE_UNAVAILABLE,
    answer,
    components,
    ingestion_unit,
    log,
    request_session,
)
from shared.db.models.kb_connectors import KbConnectorBinding

ACCEPTED = "Its sync job is enqueued (`enqueued`); the documents it lands are ingested."
NOT_FITTING: dict[int, Any] = {
    409: (
        "A setting or the item id does not fit the connection's provider "
        "(`conflicting_fields`, `fields` naming each); nothing was bound.",
        ErrorBody,
    )
}


def _accepted(row: KbConnectorBinding, job: bool, enqueued: bool) -> BindingAccepted:
    return BindingAccepted(
        **dict(BindingOut.of(row)),
        job_id=sync_job_id(row.id) if job else None,
        enqueued=enqueued,
    )


def _bind(knowledge_base_id: int, values: dict[str, Any], sync: bool) -> ResponseReturnValue:
    organization_id = current_organization_id()
    with ingestion_unit() as uow:
        row = store.create_binding(
            uow.session,
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            **values,
        )
        if sync:
            uow.enqueue(sync_request(organization_id, row.id, row.connection_id, row.provider))
        enqueued = _commit(uow, row.id) and sync
        created = _accepted(row, sync, enqueued)
    location = f"/knowledge-bases/{knowledge_base_id}/connectors/{created.id}"
    return answer(created, 201, location)


def _commit(uow: Any, binding_id: int) -> bool:
    try:
        uow.commit()
    except QUEUE_UNAVAILABLE as exc:
        log.warning("binding %s left to the refresh tick: enqueue failed: %s", binding_id, exc)
        return False
    return True


def _provider_of(organization_id: int, connection_id: int) -> str:
    with request_session() as session:
        return store.get_connection(
            session, organization_id=organization_id, connection_id=connection_id
        ).provider


@describe(
    "Bind a knowledge base (or one new document) to a connection",
    description="`settings` scope the provider: Google Drive `drive_id` (default `my-drive`), "
    "`export_format` (`text` or `html`); SharePoint `site_id` or `drive_id`; Notion "
    "`root_page_ids`; Confluence `space_keys`; Zendesk `locales`, `brand_ids`. With "
    "`item_id`, the binding is one document made from that item. " + ACCEPTED,
    body=BindingCreate,
    responses={201: ("The binding.", BindingAccepted), **AUTH, **MISSING, **NOT_FITTING},
)
def create_binding(knowledge_base_id: int) -> ResponseReturnValue:
    body = parse_json(BindingCreate, json_body())
    connector = components().connectors[_provider_of(current_organization_id(), body.connection_id)]
    values: dict[str, Any] = {
        "connection_id": body.connection_id,
        "audience": body.audience,
        "settings": {},
    }
    if body.item_id is not None:
        values["item_id"] = checked_item(connector, body.item_id)
    else:
        values["settings"] = fitted(connector, connector.settings_model, body.settings, "settings")
    return _bind(knowledge_base_id, values, body.sync)


@describe(
    "Bind a document to one provider item",
    description="The document's content is replaced by the item's at each sync (and on the "
    "base's refresh schedule); it is deleted when the provider says the item is gone. " + ACCEPTED,
    body=DocumentBindingCreate,
    responses={201: ("The binding.", BindingAccepted), **AUTH, **MISSING, **NOT_FITTING},
)
def bind_document(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    body = parse_json(DocumentBindingCreate, json_body())
    connector = components().connectors[_provider_of(current_organization_id(), body.connection_id)]
    values = {
        "connection_id": body.connection_id,
        "item_id": checked_item(connector, body.item_id),
        "document_id": document_id,
        "settings": {},
    }
    return _bind(knowledge_base_id, values, body.sync)


@describe(
    "A knowledge base's connector bindings",
    responses={200: ("Its bindings, by id.", BindingList), **AUTH, **MISSING},
)
def list_bindings(knowledge_base_id: int) -> ResponseReturnValue:
    with request_session() as session:
        rows = store.list_bindings(
            session, organization_id=current_organization_id(), knowledge_base_id=knowledge_base_id
        )
        found = [BindingOut.of(row) for row in rows]
    return answer(BindingList(bindings=found))


@describe(
    "A connector binding and its sync state",
    responses={200: ("The binding.", BindingOut), **AUTH, **MISSING},
)
def get_binding(knowledge_base_id: int, binding_id: int) -> ResponseReturnValue:
    with request_session() as session:
        row = store.get_binding(
            session,
            organization_id=current_organization_id(),
            binding_id=binding_id,
            knowledge_base_id=knowledge_base_id,
        )
        found = BindingOut.of(row)
    return answer(found)


@describe(
    "Unbind",
    description="The documents it landed stay (no longer synced).",
    responses={204: ("Unbound.", None), **AUTH, **MISSING},
)
def delete_binding(knowledge_base_id: int, binding_id: int) -> ResponseReturnValue:
    with request_session() as session:
        store.delete_binding(
            session,
            organization_id=current_organization_id(),
            binding_id=binding_id,
            knowledge_base_id=knowledge_base_id,
        )
        session.commit()
    return "", 204


@describe(
    "Sync a binding now",
    description="Enqueues `kb-connector-sync-<binding id>` (a no-op while one is queued or "
    "running). Google Drive and SharePoint list only what changed since the last pass "
    "unless `full` is true. The body may be empty.",
    body=SyncBody,
    responses={202: ("The sync is requested.", BindingAccepted), **AUTH, **MISSING},
)
def sync_binding(knowledge_base_id: int, binding_id: int) -> ResponseReturnValue:
    body = parse_json(SyncBody, json_body()) if request.get_data() else SyncBody()
    organization_id = current_organization_id()
    with ingestion_unit() as uow:
        row = store.get_binding(
            uow.session,
            organization_id=organization_id,
            binding_id=binding_id,
            knowledge_base_id=knowledge_base_id,
        )
        store.get_knowledge_base(
            uow.session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
        )
        uow.enqueue(
            sync_request(organization_id, row.id, row.connection_id, row.provider, full=body.full)
        )
        enqueued = _commit(uow, row.id)
        accepted = _accepted(row, True, enqueued)
    return answer(accepted, 202)
