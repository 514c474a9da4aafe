"""An HTTP client for third-party JSON APIs that speaks the error hierarchy.

Every provider client (Notion, Zendesk, an embeddings API, Rails' own endpoints) goes
through :class:`JsonClient`, so a status means the same everywhere:

=====================================  ==============================================
response                               raised
=====================================  ==============================================
429 with Retry-After                   ``Delay`` until then (the attempt is not spent)
503, 529 with Retry-After              ``Delay`` until then (an overloaded provider,
                                       e.g. Notion's 529 ``service_overload``)
429 without Retry-After, 5xx           ``Retryable``
timeout, connection reset, bad JSON    ``Retryable`` (a truncated page is transient)
a refused address                      ``AddressRefused`` (``Unrecoverable``)
an absolute URL of another origin      ``Unrecoverable`` (a next link is re-rooted
                                       nowhere else than the configured base URL)
401, 403                               ``Unrecoverable`` (invalid credentials)
404                                    ``NotFound`` (an ``Unrecoverable``; callers may
                                       treat one missing document as a discard)
other 4xx                              ``Unrecoverable``
=====================================  ==============================================

Its session is a guarded one (:mod:`shared.egress.session`): every connection, redirect hop
and pagination link goes to an address the process's guard allows.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

import requests

from shared.cancel_point import cancel_point
from shared.egress.addresses import AddressGuard, AddressRefused
from shared.egress.session import guarded_session, same_origin_url
from shared.errors import Delay, Retryable, Unrecoverable

DEFAULT_TIMEOUT = 30.0


class NotFound(Unrecoverable):
    """The provider answered 404."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Parse a Retry-After header (delta seconds or an HTTP date); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def raise_for_status(response: requests.Response, what: str) -> None:
    """Translate a non-2xx response into the error hierarchy."""
    status = response.status_code
    if status < 400:
        return
    detail = f"{what}: HTTP {status}"
    if status in (429, 503, 529):
        wait = retry_after_seconds(response.headers.get("Retry-After"))
        if wait is not None:
            raise Delay.after(wait, reason="retry-after" if status == 429 else "overloaded")
        if status == 429:
            raise Retryable(detail + " (rate limited, no Retry-After)")
    if status >= 500:
        raise Retryable(detail)
    if status in (401, 403):
        raise Unrecoverable(detail + " (invalid credentials)")
    if status == 404:
        raise NotFound(detail)
    raise Unrecoverable(detail)


class JsonClient:
    """A guarded ``requests`` session bound to a base URL, default headers and a timeout.

    Parameters:
      base_url: scheme and host (and an optional path prefix) of the API.
      headers: sent with every request (authorization, API version).
      timeout: seconds for connect and for each read.
      guard: the addresses it may connect to (the process's guard by default).
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
        guard: AddressGuard | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = session or guarded_session(guard)
        self.session.headers.update(headers or {})

    def url(self, path: str) -> str:
        """``path`` under the base URL; an absolute URL (a provider's next link) only when it
        has the base URL's origin (``Unrecoverable`` otherwise)."""
        if path.startswith(("http://", "https://", "//")):
            return same_origin_url(self.base_url, path)
        return f"{self.base_url}/{path.lstrip('/')}"

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Send a request; transport failures become ``Retryable``, statuses are translated.
        A job an operator cancelled stops here, before the request (``Cancelled``)."""
        cancel_point()
        what = f"{method} {path}"
        url = self.url(path)
        try:
            response = self.session.request(
                method, url, timeout=kwargs.pop("timeout", self.timeout), **kwargs
            )
        except AddressRefused as refused:
            raise AddressRefused(url, refused.host, refused.address, refused.kind) from None
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise Retryable(f"{what}: {type(exc).__name__}: {exc}") from exc
        except requests.RequestException as exc:
            raise Retryable(f"{what}: {exc}") from exc
        raise_for_status(response, what)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and decode its JSON body; a truncated or invalid body is
        ``Retryable``."""
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except (ValueError, requests.exceptions.ChunkedEncodingError) as exc:
            raise Retryable(f"{method} {path}: unreadable JSON body: {exc}") from exc

    def get(self, path: str, **params: Any) -> Any:
        return self.json("GET", path, params=params or None)

    def post(self, path: str, payload: Any) -> Any:
        return self.json("POST", path, json=payload)

    def close(self) -> None:
        self.session.close()
