"""Bearer-token check for every ``/internal`` route.

The check runs for the whole ``/internal`` path space, not per blueprint, so a service
blueprint cannot forget it and an unknown ``/internal`` path answers 401 (not 404) to a
caller without the token. A caller whose address has failed too often is answered 429
whether its token is right or wrong (``auth_throttle``): before its token is looked at, or,
on a view that checks the throttle in its own Redis call (the enqueue routes), by that call.
"""

from __future__ import annotations

import hmac
import logging

from flask import Flask, Response, request

from services.apikit.auth_throttle import count_failure, defer, throttled
from services.apikit.errors import error_response

log = logging.getLogger(__name__)

PROTECTED_PREFIX = "/internal"
REALM = "speedtier-internal"


def is_protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")


def bearer_credential() -> str | None:
    """The request's ``Authorization: Bearer`` credential, or None when there is none (the
    internal token here, an organization's API key on the ingestion API)."""
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    credential = credential.strip()
    return credential if scheme.lower() == "bearer" and credential else None


def token_matches(presented: str, expected: str) -> bool:
    """Constant-time comparison, so response timing reveals nothing about the token."""
    return hmac.compare_digest(presented.encode(), expected.encode())


def unauthorized(reason: str, *, realm: str = REALM, credential_given: bool = True) -> Response:
    """401 with the bearer challenge (RFC 6750: ``invalid_token`` once a credential was
    given)."""
    response = error_response(401, "unauthorized", message=reason)
    challenge = f'Bearer realm="{realm}"'
    if credential_given:
        challenge += ', error="invalid_token"'
    response.headers["WWW-Authenticate"] = challenge
    return response


def install_bearer_auth(app: Flask, token: str | None) -> None:
    """Require ``Authorization: Bearer <token>`` on ``/internal`` paths of ``app``.

    With ``token`` None (allowed in development and test only, see
    the assembly's ``create_app``) the routes are open.
    """

    @app.before_request
    def require_bearer_token() -> Response | None:
        if token is None or not is_protected(request.path):
            return None
        presented = bearer_credential()
        if presented is None:
            return unauthorized("missing bearer token", credential_given=False)
        right = token_matches(presented, token)
        if right and defer():  # the view's own Redis call checks the throttle
            return None
        refused = throttled()
        if refused is not None:
            return refused
        if not right:
            log.warning("rejected a wrong bearer token for %s %s", request.method, request.path)
            count_failure()
            return unauthorized("invalid bearer token")
        return None
