"""Per-organization API keys on the public ingestion routes.

Every public route of the ingestion blueprint needs ``Authorization: Bearer <key>``; the
key names the organization every query of the request is scoped to, so a route cannot be
called for another tenant, and cannot forget the check (it is the blueprint's
``before_request``, not a per-view decorator). Keys are stored as SHA-256 only
(:func:`services.ingestion.store.organization_for_key`). ``/internal`` routes of the same
blueprint are left to the internal bearer token (:mod:`services.api.auth`).
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, g, request

from services.api.auth import is_protected
from services.api.auth import unauthorized as bearer_unauthorized
from services.api.context import current_platform
from services.api.openapi import document_api_key_auth
from services.ingestion import store
from shared.db.engine import session_scope

log = logging.getLogger(__name__)

REALM = "speedtier-ingestion"
_ORGANIZATION = "ingestion_organization_id"


def presented_key() -> str | None:
    """The bearer credential of the request, or None when there is none."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def unauthorized(reason: str, *, credential_given: bool = True) -> Response:
    """401 with this API's bearer challenge."""
    return bearer_unauthorized(reason, realm=REALM, credential_given=credential_given)


def authenticate() -> Response | None:
    """Resolve the request's key to its organization, or answer 401."""
    if is_protected(request.path):
        return None
    key = presented_key()
    if key is None:
        return unauthorized("missing API key", credential_given=False)
    with session_scope(current_platform().sessions) as session:
        organization_id = store.organization_for_key(session, key)
    if organization_id is None:
        log.info("rejected an unknown or revoked API key for %s %s", request.method, request.path)
        return unauthorized("unknown or revoked API key")
    setattr(g, _ORGANIZATION, organization_id)
    return None


def require_api_key(blueprint: Blueprint) -> None:
    """Authenticate every non-``/internal`` request to ``blueprint`` by API key."""
    blueprint.before_request(authenticate)
    document_api_key_auth(blueprint.name)


def current_organization_id() -> int:
    """The organization the request's API key belongs to.

    Raises:
      RuntimeError: outside a request authenticated by :func:`authenticate`.
    """
    organization_id = g.get(_ORGANIZATION)
    if not isinstance(organization_id, int):
        raise RuntimeError("no authenticated organization: is the route behind require_api_key?")
    return organization_id
