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
                                                   window's end), the same answer whether the
                                                   credential is right or wrong (on the enqueue
                                                   routes, not the same time: below); nothing
                                                   is done
a request without any credential                   not counted, never 429 (it guesses nothing)
Redis unreachable                                  checked as usual, not counted, a warning at
                                                   most once a minute: the throttle fails open,
                                                   authentication never does
=================================================  ===========================================

Everywhere but on the enqueue routes the window is read before the credential is looked at.
A view marked :func:`checks_auth_throttle` (the enqueue routes) reads it in its own Redis call
instead, so a valid enqueue is one round trip, not two: the bearer check lets a right token
through without reading the window, the view passes the address's window to the router as a
guard (:func:`deferred_guard`), and the enqueue script reads it before it does anything else
(``tiers/lua/enqueue.lua``). A wrong token is handled as everywhere. The answer is the rule's:
from an address whose window is full, a right token gets the same 429 and ``Retry-After`` as
a wrong one, and nothing is enqueued; a request the view answers before its guarded call
checked the window (a body refused by validation or too large) is checked the usual way as
it is answered (:func:`install_auth_throttle`), so it gets that 429 too. What differs is the
time a right token takes to be refused: its body is read, validated and routed first (about
0.15 ms more for a one-request body, more for a larger one), a difference a caller timing
its answers could tell apart; the token's strength, not the throttle, is what keeps it from
being guessed (production refuses a token under 96 bits, ``shared.secret_strength``).

The source address is the TCP peer, or with ``SPEEDTIER_TRUSTED_PROXY_HOPS=n`` the address
that many proxies back in ``X-Forwarded-For`` (``werkzeug.middleware.proxy_fix.ProxyFix``,
installed by the app factory). Webhook signatures are not counted: a provider's addresses
deliver for every tenant, and one tenant's wrong secret must not hold back another's events.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from flask import Flask, Response, current_app, g, request

from services.apikit.errors import error_response
from shared.errors import WindowFull
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows, WindowGuard
from tiers.redis_retry import REDIS_DOWN

log = logging.getLogger(__name__)

_KEY = "speedtier.auth_throttle"
#: ``flask.g``: the bearer check handed the throttle to the view (:func:`defer`).
_DEFERRED = "speedtier_auth_throttle_deferred"
#: A view's mark: it checks the throttle in its own Redis call (:func:`checks_auth_throttle`).
_CHECKS_ITSELF = "speedtier_checks_auth_throttle"
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
        ends = self.full_until(address, now)
        return None if ends is None else seconds_until(ends, now)

    def full_until(self, address: str, now: float | None = None) -> float | None:
        """The epoch seconds at which ``address``'s full window ends, or None when it is not
        full (or Redis is unreachable: the throttle fails open)."""
        try:
            used, ends = self.windows.used(self._key(address), self.rule, now=now)
        except REDIS_DOWN as exc:
            self._warn(exc)
            return None
        return ends if used >= self.rule.limit else None

    def guard(self, address: str) -> WindowGuard:
        """``address``'s window as a guard for an enqueue (``Router.enqueue_many``): checked
        in the enqueue's own script call, or read alone (failing open) when the enqueue goes
        to another Redis."""
        return WindowGuard(self._key(address), self.rule, lambda: self.full_until(address))

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


def seconds_until(ends_at: float, now: float | None = None) -> int:
    """Whole seconds (at least 1) until ``ends_at``: a ``Retry-After``."""
    return max(1, math.ceil(ends_at - (time.time() if now is None else now)))


def install_auth_throttle(app: Flask, throttle: AuthThrottle) -> None:
    """Rate-limit failed authentication on ``app`` (:func:`throttled`, :func:`count_failure`;
    a request handed to its view unchecked, :func:`defer`, that the view answers before it
    takes the check over is checked as it is answered)."""
    app.extensions[_KEY] = throttle
    app.after_request(_check_deferred)


View = TypeVar("View", bound=Callable[..., object])


def checks_auth_throttle(view: View) -> View:
    """Mark ``view`` as one that checks the throttle in its own Redis call
    (:func:`deferred_guard`), so the bearer check does not read the window first."""
    setattr(view, _CHECKS_ITSELF, True)
    return view


def defer() -> bool:
    """Hand the throttle check of a request whose credential is right to its view, when the
    view checks it itself (:func:`checks_auth_throttle`); False: check it now."""
    if _throttle() is None or request.endpoint is None:
        return False
    view = current_app.view_functions.get(request.endpoint)
    if not getattr(view, _CHECKS_ITSELF, False):
        return False
    setattr(g, _DEFERRED, True)
    return True


def deferred_guard() -> WindowGuard | None:
    """The request's address's window as the guard of the view's Redis call, when the check
    was handed to the view (:func:`defer`); None otherwise. The view passes it to that call,
    answers :class:`~shared.errors.WindowFull` with :func:`refused_by_guard`, and calls
    :func:`guard_checked` once the call has checked it (or may have); until then, an answer
    is checked the usual way as it leaves."""
    throttle = _throttle()
    if not getattr(g, _DEFERRED, False) or throttle is None:
        return None
    return throttle.guard(source_address())


def guard_checked() -> None:
    """The view's guarded call checked the address's window, or may have (it ran, or was
    sent and not answered): the view's answer stands as it is."""
    g.pop(_DEFERRED, None)


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
    return None if seconds is None else refusal(seconds)


def refused_by_guard(full: WindowFull) -> Response:
    """The answer to a guarded call refused because the address's window is full: the same
    429 as :func:`throttled`'s."""
    guard_checked()
    return refusal(seconds_until(full.ends_at))


def refusal(seconds: int) -> Response:
    """429 ``too_many_failed_authentications`` with ``Retry-After: seconds``."""
    response = error_response(
        429,
        "too_many_failed_authentications",
        message=f"too many failed authentications from this address; retry in {seconds} s",
    )
    response.headers["Retry-After"] = str(seconds)
    return response


def _check_deferred(response: Response) -> Response:
    """A request handed to its view unchecked and answered before the view's guarded call
    checked the window (a body refused by validation, Redis refusing the call before it ran):
    checked now, and answered 429 when its address's window is full."""
    if not g.pop(_DEFERRED, False):
        return response
    return throttled() or response


def count_failure() -> None:
    """Count the request's credential, which did not authenticate, against its address."""
    throttle = _throttle()
    if throttle is not None:
        throttle.failed(source_address())
