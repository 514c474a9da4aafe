"""The ingestion API (seed 003): knowledge bases, documents, versions and search, one route
module each, plus the internal API-key route and the error answers.

Public routes, each authenticated by an organization's API key
(:mod:`services.ingestion.api_auth`), every query scoped to that organization: another
organization's ids answer 404 exactly like missing ones. ``GET /usage`` totals the
organization's usage events. ``/connections`` store an organization's provider
credentials (encrypted, never returned) and ``/knowledge-bases/:id/connectors`` bind a base
or a document to one and trigger its sync. One internal route,
``POST /internal/ingestion/api_keys``, lets the main application provision keys (behind
the internal bearer token).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flask import Blueprint
from flask.sansio.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue

from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker
from services.ingestion.api_auth import require_api_key
from services.ingestion.connector_sync.adapters import KbConnector
from services.ingestion.connector_sync.registry import CONNECTORS
from services.ingestion.routes import (
    api_keys,
    bindings,
    connections,
    documents,
    knowledge_bases,
    search,
    usage,
    versions,
)
from services.ingestion.routes.context import (
    BASE,
    BINDING,
    COMPONENTS,
    CONNECTION,
    DOCUMENT,
    NAME,
    Components,
)
from services.ingestion.routes.documents import UPLOAD_BODY_LIMIT, allow_uploads
from services.ingestion.routes.errors import register_error_handlers
from shared.credentials import CredentialBox

__all__ = ["NAME", "PUBLIC_PATHS", "UPLOAD_BODY_LIMIT", "blueprint"]

#: The public path space, every path of which needs an API key (unrouted ones too).
PUBLIC_PATHS = ("/knowledge-bases", "/search", "/usage", "/connections")

_ROUTES: tuple[tuple[str, str, Callable[..., ResponseReturnValue]], ...] = (
    ("/knowledge-bases", "POST", knowledge_bases.create_knowledge_base),
    ("/knowledge-bases", "GET", knowledge_bases.list_knowledge_bases),
    (BASE, "GET", knowledge_bases.get_knowledge_base),
    (BASE, "DELETE", knowledge_bases.delete_knowledge_base),
    (f"{BASE}/documents", "POST", documents.add_document),
    (f"{BASE}/documents", "GET", documents.list_documents),
    (DOCUMENT, "GET", documents.get_document),
    (DOCUMENT, "DELETE", documents.delete_document),
    (f"{DOCUMENT}/retry", "POST", documents.retry_document),
    (f"{DOCUMENT}/versions", "GET", versions.list_versions),
    (f"{DOCUMENT}/versions/diff", "GET", versions.diff_versions),
    (f"{DOCUMENT}/rollback", "POST", versions.rollback_document),
    (f"{BASE}/search", "POST", search.search_knowledge_base),
    ("/search", "POST", search.search_all),
    ("/usage", "GET", usage.get_usage),
    ("/connections", "POST", connections.create_connection),
    ("/connections", "GET", connections.list_connections),
    (CONNECTION, "GET", connections.get_connection),
    (CONNECTION, "PUT", connections.update_connection),
    (CONNECTION, "DELETE", connections.delete_connection),
    (f"{BASE}/connectors", "POST", bindings.create_binding),
    (f"{BASE}/connectors", "GET", bindings.list_bindings),
    (BINDING, "GET", bindings.get_binding),
    (BINDING, "DELETE", bindings.delete_binding),
    (f"{BINDING}/sync", "POST", bindings.sync_binding),
    (f"{DOCUMENT}/connector", "PUT", bindings.bind_document),
    ("/internal/ingestion/api_keys", "POST", api_keys.create_api_key),
)


def blueprint(
    *,
    chunker: DocumentChunker,
    embedder: Embedder,
    credentials: CredentialBox | None = None,
    connectors: Mapping[str, KbConnector] | None = None,
) -> Blueprint:
    """The ingestion API, searching and rolling back with ``chunker`` and ``embedder``
    (the ones the ingestion jobs use, so vectors stay comparable), sealing connection
    credentials with ``credentials`` and checking them against ``connectors``."""
    routes = Blueprint(NAME, __name__)
    require_api_key(routes, PUBLIC_PATHS)
    routes.before_request(allow_uploads)

    def attach(state: BlueprintSetupState) -> None:
        state.app.extensions[COMPONENTS] = Components(
            chunker,
            embedder,
            credentials or CredentialBox(),
            connectors if connectors is not None else CONNECTORS,
        )

    routes.record_once(attach)
    register_error_handlers(routes)
    for rule, method, view in _ROUTES:
        routes.add_url_rule(rule, view_func=view, methods=[method])
    return routes
