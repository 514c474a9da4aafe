"""Failed authentication, rate-limited per source address.

A fixed window per source address (``SPEEDTIER_AUTH_FAILURE_RATE``, ``LIMIT/SECONDS``,
``tiers.rate_window``) counts the credentials that did not authenticate: a wrong internal
token, an unknown or revoked API key, a dashboard sign-in with the wrong token, a forged or
expired dashboard session.

=================================================  ===========================================
event                                              answer
=================================================  ===========================================
a credential from an address under its limit       checked as usual
the check fails                                    401, counted in the address's window
a credential from an address whose window is full  429 with ``Retry-After`` (seconds to the
                                                   window's end); the credential is not checked,
                                                   so a right guess is not revealed either
a request without any credential                   not counted, never 429 (it guesses nothing)
Redis unreachable                                  checked as usual, not counted, a warning at
                                                   most once a minute: the throttle fails open,
                                                   authentication never does
=================================================  ===========================================

The source address is the TCP peer, or with ``SPEEDTIER_TRUSTED_PROXY_HOPS=n`` the address
that many proxies back in ``X-Forwarded-For`` (``werkzeug.middleware.proxy_fix.ProxyFix``,
installed by the app factory). Webhook signatures are not counted: a provider's addresses
deliver for every tenant, and one tenant's wrong secret must not hold back another's events.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from flask import Flask, Response, current_app, request

from services.apikit.errors import error_response
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows
from tiers.redis_retry import REDIS_DOWN

log = logging.getLogger(__name__)

_KEY = "speedtier.auth_throttle"
#: Seconds between two warnings that the throttle cannot reach Redis.
WARN_EVERY_SECONDS = 60.0


@dataclass
class AuthThrottle:
    """Failed authentications per source address, in Redis fixed windows shared by every
    API process."""

    windows: RateWindows
    rule: WindowRule
    _warned_at: float = 0.0

    def _key(self, address: str) -> str:
        return self.windows.key("auth-failures", address)

    def retry_after(self, address: str, now: float | None = None) -> int | None:
        """Seconds until ``address`` may present a credential again, or None when it may now."""
        now = time.time() if now is None else now
        try:
            used, ends = self.windows.used(self._key(address), self.rule, now=now)
        except REDIS_DOWN as exc:
            self._warn(exc)
            return None
        return max(1, math.ceil(ends - now)) if used >= self.rule.limit else None

    def failed(self, address: str, now: float | None = None) -> None:
        """Count one failed authentication from ``address``."""
        try:
            self.windows.acquire(self._key(address), self.rule, now=now)
        except REDIS_DOWN as exc:
            self._warn(exc)

    def _warn(self, exc: Exception) -> None:
        if time.monotonic() - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = time.monotonic()
            log.warning("failed authentications are not rate-limited: redis unreachable (%s)", exc)


def install_auth_throttle(app: Flask, throttle: AuthThrottle) -> None:
    """Rate-limit failed authentication on ``app`` (:func:`throttled`, :func:`count_failure`)."""
    app.extensions[_KEY] = throttle


def _throttle() -> AuthThrottle | None:
    throttle: AuthThrottle | None = current_app.extensions.get(_KEY)
    return throttle


def source_address() -> str:
    """The request's source address (after ``ProxyFix`` when proxies are trusted)."""
    return request.remote_addr or "unknown"


def throttled() -> Response | None:
    """429 with ``Retry-After`` when the request's address has failed too often; call it
    before checking a credential the request presents."""
    throttle = _throttle()
    seconds = throttle.retry_after(source_address()) if throttle is not None else None
    if seconds is None:
        return None
    response = error_response(
        429,
        "too_many_failed_authentications",
        message=f"too many failed authentications from this address; retry in {seconds} s",
    )
    response.headers["Retry-After"] = str(seconds)
    return response


def count_failure() -> None:
    """Count the request's credential, which did not authenticate, against its address."""
    throttle = _throttle()
    if throttle is not None:
        throttle.failed(source_address())
