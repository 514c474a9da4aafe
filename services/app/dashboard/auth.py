"""Who may use the dashboard, and proof that a form was sent by its own page.

=====================  =====================================================================
how                    what
=====================  =====================================================================
sign-in form           ``/dashboard/login``: a name (kept with every action taken) and the
                       ``INTERNAL_API_TOKEN``; sets the ``speedtier_operator`` cookie:
                       ``name|issued`` signed with a key derived from the token (changing
                       the token signs everyone out), HttpOnly, SameSite=Strict, Secure
                       (except over plain http in development and test), valid 12 hours
``Authorization``      ``Bearer <INTERNAL_API_TOKEN>`` on any dashboard request (scripts);
                       the operator is then ``bearer``; no CSRF token is needed, because a
                       browser never adds that header on its own
no token configured    development and test only (the app refuses to start elsewhere): the
                       dashboard is open, like ``/internal``, and the page says so
=====================  =====================================================================

Failed sign-ins, wrong bearer tokens and forged or expired cookies count against the
source address (``services.apikit.auth_throttle``): past the limit, 429 with Retry-After.

CSRF: every state-changing form carries ``csrf_token``, an HMAC of the session cookie; a
POST whose token does not match gets 403.

Sign-out revokes the session on the server: the cookie's signature is kept in Redis
(``<ns>:dashboard:revoked:<sha256>``) until the session would have expired, so a copy of the
cookie is refused after sign-out. Failed sign-ins, wrong bearer tokens and forged or expired
cookies count against the source address like every failed authentication
(``services.apikit.auth_throttle``, ``SPEEDTIER_AUTH_FAILURE_RATE``): past the limit, 429 with
Retry-After, even to the right token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import Request, Response, request

from services.apikit.auth import bearer_credential, token_matches
from shared.errors import SpeedtierError

if TYPE_CHECKING:
    from services.app.bootstrap import Platform

log = logging.getLogger(__name__)

COOKIE = "speedtier_operator"
#: Failed sign-ins allowed from one address per window, and the window (seconds).
SESSION_SECONDS = 12 * 3600
OPEN_OPERATOR = "anonymous (no token configured)"


class BadSession(SpeedtierError, ValueError):
    """A session cookie that is forged, expired or signed with another token."""


@dataclass(frozen=True)
class Operator:
    """Who is using the dashboard, and how they proved it."""

    name: str
    via: str  # "cookie", "bearer" or "open"
    session: str = ""  # the cookie's value (the CSRF token is derived from it)

    def csrf_token(self, token: str | None) -> str:
        if self.via != "cookie" or token is None:
            return ""
        return _sign(token, f"csrf|{self.session}")


def _key(token: str) -> bytes:
    return hashlib.sha256(f"speedtier-dashboard|{token}".encode()).digest()


def _sign(token: str, payload: str) -> str:
    return hmac.new(_key(token), payload.encode(), hashlib.sha256).hexdigest()


def clean_name(name: str) -> str:
    """An operator's name as kept in the audit: printable, single line, at most 100 chars."""
    return " ".join("".join(ch for ch in name if ch.isprintable()).split())[:100]


def issue_session(token: str, name: str, now: float | None = None) -> str:
    issued = int(time.time() if now is None else now)
    payload = f"{clean_name(name)}|{issued}"
    return f"{payload}|{_sign(token, payload)}"


def read_session(token: str, value: str, now: float | None = None) -> str:
    """The operator's name in a session cookie.

    Raises:
      BadSession: forged, signed with another token, malformed or expired.
    """
    payload, _, signature = value.rpartition("|")
    name, _, issued = payload.rpartition("|")
    if not name or not issued.isdigit() or not token_matches(signature, _sign(token, payload)):
        raise BadSession("session cookie not signed by this deployment's token")
    if (time.time() if now is None else now) - int(issued) > SESSION_SECONDS:
        raise BadSession("session expired")
    return name


def _revoked_key(platform: Platform, value: str) -> str:
    digest = hashlib.sha256(value.encode()).hexdigest()
    return f"{platform.settings.redis_namespace}:dashboard:revoked:{digest}"


def revoke(platform: Platform, value: str) -> None:
    """Refuse session cookie ``value`` from now on (sign-out)."""
    platform.broker.client.set(_revoked_key(platform, value), 1, ex=SESSION_SECONDS)


def operator_of(req: Request, token: str | None, platform: Platform) -> Operator | None:
    """The operator making ``req``, or None when it is not signed in (or signed out)."""
    if token is None:
        return Operator(OPEN_OPERATOR, "open")
    presented = bearer_credential()
    if presented is not None:
        return Operator("bearer", "bearer") if token_matches(presented, token) else None
    value = req.cookies.get(COOKIE)
    if not value:
        return None
    try:
        name = read_session(token, value)
    except BadSession:
        return None
    if platform.broker.client.exists(_revoked_key(platform, value)):
        return None
    return Operator(name, "cookie", value)


def presents_credential(req: Request) -> bool:
    """Whether ``req`` offers a bearer token or a session cookie (what a failed sign-in
    counts and what a throttled address is refused)."""
    return bearer_credential() is not None or bool(req.cookies.get(COOKIE))


def csrf_ok(operator: Operator, token: str | None) -> bool:
    """Whether a state-changing request carries proof it came from the dashboard's page."""
    if operator.via != "cookie":
        return True  # bearer: a browser never sends it unasked; open: no session to forge
    sent = request.form.get("csrf_token", "")
    return bool(sent) and token_matches(sent, operator.csrf_token(token))


def set_session_cookie(response: Response, value: str, *, secure: bool) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="Strict",
        secure=secure,
        path="/dashboard",
    )
