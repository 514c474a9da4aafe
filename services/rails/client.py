"""One HTTP client for Rails' ``/internal/*`` endpoints, answers classified once.

==================================  ================================  =====================
Rails answered                      raised                            job outcome
==================================  ================================  =====================
2xx                                 (returns the JSON body)           -
429 with ``Retry-After``            :class:`~shared.errors.Delay`     delayed, attempt kept
error body ``"retryable": true``    :class:`RailsRetryable`           retried
error body ``"retryable": false``   :class:`RailsUnrecoverable`       failed, no retry
                                    (404: :class:`RailsRecordMissing`) (record_missing)
no verdict in the body:
  404                               :class:`RailsRecordMissing`       record_missing
  429 without ``Retry-After``       :class:`RailsRetryable`           retried
  other 4xx (401, 403, 409, 422...) :class:`RailsUnrecoverable`       failed, no retry
  5xx                               :class:`RailsRetryable`           retried
timeout, refused, reset, bad JSON   :class:`RailsTransportError`      retried
==================================  ================================  =====================

Rails' error body (``{"error": ..., "error_class": ..., "retryable": ...}`` from the
``Internal::BaseController`` rescue, or any other JSON) is its *classification*, and its
``retryable`` flag is Rails' verdict: it decides retry against fail for every call, so a 4xx
Rails marks retryable (a lock held, a record not yet visible) is retried and a 5xx Rails marks
non-retryable (a validation that will never pass) fails at once. The status decides only
when the body states no verdict (not JSON, or no boolean ``retryable``). Every error above
carries the classification (``classification``, ``error_class``, ``retryable``) and prints
it, so the job record's ``last_error`` keeps it (``RailsUnrecoverable: POST /internal/... ->
422 {"error_class": "Unit21::AuthError", ...}``).

Whether a request that failed may still have taken effect matters to senders (delivery
claims): :attr:`RailsError.answered` is True when Rails sent a response (a 4xx is a proven
rejection), False for a timeout or a dropped connection (ambiguous).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import requests

from shared.config import Settings
from shared.errors import Delay, RecordMissing, Retryable, SpeedtierError, Unrecoverable

log = logging.getLogger(__name__)

#: How much of Rails' error body is kept in the message (the job record keeps 2,000 chars).
CLASSIFICATION_CHARS = 600


class RailsError(SpeedtierError):
    """What every Rails failure carries, mixed into the outcome it is raised as.

    Attributes:
      method, path: the request.
      status: Rails' HTTP status, or None when no response came back.
      classification: Rails' error body (a dict when it was JSON, else ``{"body": text}``).
    """

    def __init__(
        self,
        method: str,
        path: str,
        status: int | None,
        classification: Mapping[str, Any] | None = None,
        detail: str = "",
    ) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.classification: dict[str, Any] = dict(classification or {})
        shown = json.dumps(self.classification, sort_keys=True)[:CLASSIFICATION_CHARS]
        answer = f"-> {status}" if status is not None else "-> no answer"
        super().__init__(f"{method} {path} {answer} {detail or shown}".rstrip())

    @property
    def answered(self) -> bool:
        """Rails sent a response: the request provably reached Rails' controller."""
        return self.status is not None

    @property
    def error_class(self) -> str | None:
        value = self.classification.get("error_class")
        return value if isinstance(value, str) else None

    @property
    def retryable(self) -> bool | None:
        """Rails' own verdict when its body states one (``"retryable": true|false``)."""
        value = self.classification.get("retryable")
        return value if isinstance(value, bool) else None


class RailsRecordMissing(RailsError, RecordMissing):
    """Rails answered 404: the record is gone (or belongs to another organization)."""


class RailsUnrecoverable(RailsError, Unrecoverable):
    """Rails refused the request with a 4xx other than 404 and 429."""


class RailsRetryable(RailsError, Retryable):
    """Rails answered 5xx (or 429 without Retry-After)."""


class RailsTransportError(RailsRetryable):
    """No usable answer: a timeout, a refused or reset connection, a body that is not JSON."""


class RailsNotConfigured(Unrecoverable):
    """``RAILS_INTERNAL_URL`` is not set, so no Rails endpoint can be called."""


class RailsClient:
    """Calls Rails' ``/internal/*`` endpoints with the bearer token.

    Parameters:
      base_url: Rails' root URL (``RAILS_INTERNAL_URL``), without ``/internal``.
      token: the bearer token Rails' internal controllers require (``RAILS_INTERNAL_TOKEN``).
      timeout: seconds for connect and read, each.
      session: a ``requests.Session`` to reuse connections (one per client by default).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.session = session or requests.Session()

    @classmethod
    def from_settings(cls, settings: Settings) -> RailsClient:
        """The client the settings describe.

        Raises:
          RailsNotConfigured: ``RAILS_INTERNAL_URL`` is unset (a job calling Rails fails
            unrecoverable with this message instead of retrying against nothing).
        """
        if not settings.rails_internal_url:
            raise RailsNotConfigured("RAILS_INTERNAL_URL is not set: Rails cannot be called")
        token = settings.rails_internal_token
        return cls(
            settings.rails_internal_url,
            token.get_secret_value() if token else None,
            timeout=settings.rails_timeout_seconds,
        )

    def post(
        self,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path`` (``/internal/...``); Rails' JSON answer.

        Raises the table at the top of this module.
        """
        return self.request("POST", path, body, timeout=timeout)

    def get(self, path: str, *, timeout: float | None = None) -> dict[str, Any]:
        return self.request("GET", path, None, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        if not path.startswith("/internal/"):
            raise ValueError(f"not a Rails internal path: {path!r}")
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        wait = timeout or self.timeout
        try:
            response = self.session.request(
                method,
                self.base_url + path,
                json=dict(body) if body is not None else None,
                headers=headers,
                timeout=(wait, wait),
            )
            content = response.content  # a truncated body raises here
        except requests.RequestException as exc:
            raise RailsTransportError(method, path, None, detail=type(exc).__name__) from exc
        return _classified(method, path, response, content)


def _classified(
    method: str, path: str, response: requests.Response, content: bytes
) -> dict[str, Any]:
    status = response.status_code
    parsed = _json(content)
    if 200 <= status < 300:
        if parsed is None and content.strip():
            raise RailsTransportError(method, path, None, detail=f"{status} body is not JSON")
        return parsed if isinstance(parsed, dict) else {"data": parsed}
    classification = (
        parsed if isinstance(parsed, dict) else {"body": content[:300].decode("utf-8", "replace")}
    )
    if status == 429:
        seconds = _retry_after(response.headers.get("Retry-After"))
        if seconds is not None:
            raise Delay.after(seconds, reason=f"rails 429 on {path}")
    verdict = classification.get("retryable")
    if verdict is True:
        raise RailsRetryable(method, path, status, classification)
    if status == 404:
        raise RailsRecordMissing(method, path, status, classification)
    if verdict is False:
        raise RailsUnrecoverable(method, path, status, classification)
    if status == 429:
        raise RailsRetryable(method, path, status, classification)
    if 400 <= status < 500:
        raise RailsUnrecoverable(method, path, status, classification)
    raise RailsRetryable(method, path, status, classification)


def _json(content: bytes) -> Any:
    if not content.strip():
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header (delta-seconds; an HTTP date counts from now)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    from shared.db.base import utcnow

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - utcnow()).total_seconds())
