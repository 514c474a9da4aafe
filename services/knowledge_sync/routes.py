"""``POST /internal/knowledge_base_sync/enqueue``: the route Rails' dispatcher calls."""

from __future__ import annotations

from dataclasses import replace

from flask import Blueprint

from router.requests import JobRequest
from services.apikit.context import current_platform
from services.apikit.enqueue import enqueue_blueprint
from services.knowledge_sync import unit_routing
from shared.db.engine import session_scope

KINDS = ("sync_source", "sync_document", "sync_document_chunks", "start_crawl", "crawl_url")
_ID_FIELD = {"sync_source": "source_id", "sync_document": "document_id"}


def _with_routing(requests: list[JobRequest]) -> list[JobRequest]:
    """Fill in each source's and document's provider and data source, looked up within its
    organization, so the router picks the provider's tier and window. A missing or
    cross-tenant id stays as sent: its job completes as record-missing."""
    wanted: dict[str, list[tuple[int, int]]] = {"sync_source": [], "sync_document": []}
    for request in requests:
        field = _ID_FIELD.get(request.kind)
        value = request.params.get(field) if field else None
        if isinstance(value, int) and isinstance(request.organization_id, int):
            wanted[request.kind].append((request.organization_id, value))
    with session_scope(current_platform().sessions) as session:
        found = {
            "sync_source": unit_routing.source_routing(session, wanted["sync_source"]),
            "sync_document": unit_routing.document_routing(session, wanted["sync_document"]),
        }
    completed = []
    for request in requests:
        field = _ID_FIELD.get(request.kind)
        key = (request.organization_id, request.params.get(field)) if field else None
        routing = found[request.kind].get(key) if key else None  # type: ignore[arg-type]
        if routing is not None:
            provider, ods = routing
            params = {**request.params, "provider": provider, "organization_data_source_id": ods}
            request = replace(request, params=params)
        completed.append(request)
    return completed


def blueprint() -> Blueprint:
    return enqueue_blueprint(
        "knowledge_base_sync",
        "/internal/knowledge_base_sync",
        KINDS,
        "Enqueue Knowledge Library sync units (Rails' KnowledgeBaseSyncDispatch)",
        prepare=_with_routing,
    )
