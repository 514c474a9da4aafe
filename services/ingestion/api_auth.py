"""Per-organization API keys on the public ingestion routes.

Every public route of the ingestion blueprint needs ``Authorization: Bearer <key>``; the
key names the organization every query of the request is scoped to, so a route cannot be
called for another tenant, and cannot forget the check. The check guards the blueprint's
whole public path space (``/knowledge-bases...``, ``/search``) before routing is looked at,
so a path that matches no route, a wrong method or a malformed id answers 401 without a key,
and reveals nothing about the routes. Keys are stored as SHA-256 only
(:func:`services.ingestion.store.organization_for_key`). ``/internal`` routes of the same
blueprint are left to the internal bearer token (:mod:`services.apikit.auth`). An address
that presented too many unknown keys is answered 429 before its key is looked up
(``services.apikit.auth_throttle``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from flask import Blueprint, Response, g, request

from services.apikit.auth import bearer_credential, is_protected
from services.apikit.auth import unauthorized as bearer_unauthorized
from services.apikit.auth_throttle import count_failure, throttled
from services.apikit.context import current_platform
from services.apikit.openapi import document_api_key_auth
from services.ingestion import store
from shared.db.engine import session_scope

log = logging.getLogger(__name__)

REALM = "speedtier-ingestion"
_ORGANIZATION = "ingestion_organization_id"


def unauthorized(reason: str, *, credential_given: bool = True) -> Response:
    """401 with this API's bearer challenge."""
    return bearer_unauthorized(reason, realm=REALM, credential_given=credential_given)


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


def authenticate() -> Response | None:
    """Resolve the request's key to its organization, or answer 401."""
    key = bearer_credential()
    if key is None:
        return unauthorized("missing API key", credential_given=False)
    refused = throttled()
    if refused is not None:
        return refused
    with session_scope(current_platform().sessions) as session:
        organization_id = store.organization_for_key(session, key)
    if organization_id is None:
        log.info("rejected an unknown or revoked API key for %s %s", request.method, request.path)
        count_failure()
        return unauthorized("unknown or revoked API key")
    setattr(g, _ORGANIZATION, organization_id)
    return None


def require_api_key(blueprint: Blueprint, public_paths: Sequence[str]) -> None:
    """Authenticate by API key every request under ``public_paths`` (``/internal`` ones
    excepted), whether or not it matches one of ``blueprint``'s routes."""
    blueprint.before_app_request(_guard(tuple(public_paths)))
    document_api_key_auth(blueprint.name)


def _guard(public_paths: tuple[str, ...]) -> Callable[[], Response | None]:
    def authenticate_public_paths() -> Response | None:
        if is_protected(request.path) or not _under(request.path, public_paths):
            return None
        return authenticate()

    return authenticate_public_paths


def current_organization_id() -> int:
    """The organization the request's API key belongs to.

    Raises:
      RuntimeError: outside a request authenticated by :func:`authenticate`.
    """
    organization_id = g.get(_ORGANIZATION)
    if not isinstance(organization_id, int):
        raise RuntimeError("no authenticated organization: is the route behind require_api_key?")
    return organization_id
