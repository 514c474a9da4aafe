"""Every error the internal API answers, as JSON.

==========================================  ======  =========================================
cause                                       status  body
==========================================  ======  =========================================
``ValidationFailed`` (bad JSON, types,      400     ``{"error": "invalid_request",
missing fields, unknown kinds, NUL)                  "fields": {path: message}}``
``ConflictingFields`` (well-formed fields   409     ``{"error": "conflicting_fields",
that contradict each other or the stored             "message": ..., "fields": {...}}``
record: a pinned id of another record, a
setting of another provider)
body over ``SPEEDTIER_API_MAX_BODY_BYTES``  413     ``{"error": "payload_too_large", ...}``
(declared or streamed)
no route, a path id that is not an id       404     ``{"error": "not_found"}``
route without that method                   405     ``{"error": "method_not_allowed"}``
``QueueUnavailable``, Redis unreachable     503     ``{"error": "queue_unavailable"}``
or read-only (nothing enqueued, or only             (``accepted``: what was enqueued, when
the requests listed in ``accepted``)                 a call spanned several round trips)
``QueueFull``, Redis out of memory          503     ``{"error": "queue_full"}`` (nothing
(``maxmemory``, ``noeviction``)                     of the refused batch was enqueued)
``EnqueueOutcomeUnknown``: sent, no answer  504     ``{"error": "enqueue_outcome_unknown",
(Redis stalled): may or may not be                  "unknown": [...], "accepted": [...]}``
enqueued; sending again is safe
PostgreSQL unreachable (SQLAlchemy or       503     ``{"error": "database_unavailable"}``
psycopg operational/connection errors),
or refusing writes for now (read-only,
in recovery, failing over: SQLSTATE 25006)
anything else                               500     ``{"error": "internal_error"}``
==========================================  ======  =========================================

Unexpected exceptions are handled through the 500 handler, not an ``Exception`` handler, so
Flask still signals them (and Sentry's Flask integration still reports them).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
import redis
import sqlalchemy.exc
from flask import Flask, Response, current_app, jsonify
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, InternalServerError, RequestEntityTooLarge

from shared.errors import (
    ConflictingFields,
    EnqueueOutcomeUnknown,
    QueueFull,
    QueueUnavailable,
    ValidationFailed,
)
from shared.outages import is_infrastructure_outage
from tiers.redis_retry import REDIS_DOWN

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying after a 503.
RETRY_AFTER_SECONDS = 5

#: Redis failures that mean "the queue cannot take work now", raised outside the router
#: (which already turns connection errors into QueueUnavailable).
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (*REDIS_DOWN, redis.exceptions.ReadOnlyError)
#: Redis out of memory outside the router: the same 503 as ``QueueFull``.
REDIS_FULL: tuple[type[Exception], ...] = (redis.exceptions.OutOfMemoryError,)

#: PostgreSQL failures that mean "the database cannot be reached now": a refused or lost
#: connection, an exhausted pool. Anything else from the database stays a 500.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def field_path(location: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``("requests", 0, "kind")`` ->
    ``requests[0].kind``; the body as a whole is ``body``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


def validation_failed(error: ValidationError) -> ValidationFailed:
    """A pydantic error as the ValidationFailed the 400 handler answers."""
    fields: dict[str, str] = {}
    for item in error.errors(include_url=False):
        fields.setdefault(field_path(item["loc"]), item["msg"])
    return ValidationFailed(fields)


def error_response(status: int, error: str, **fields: Any) -> Response:
    """A JSON error body ``{"error": error, **fields}`` with ``status``."""
    response = jsonify({"error": error, **fields})
    response.status_code = status
    return response


def invalid_request(fields: dict[str, str]) -> Response:
    return error_response(400, "invalid_request", fields=fields)


def _validation_failed(exc: ValidationFailed) -> Response:
    return invalid_request(exc.errors)


def _conflicting_fields(exc: ConflictingFields) -> Response:
    return error_response(409, "conflicting_fields", message=str(exc), fields=exc.errors)


def unavailable(error: str, message: str, retry_after: int = RETRY_AFTER_SECONDS) -> Response:
    """503 ``{"error": error, "message": message}`` with ``Retry-After: retry_after``."""
    response = error_response(503, error, message=message)
    response.headers["Retry-After"] = str(retry_after)
    return response


#: Seconds a client should wait before sending again after Redis said it is out of memory:
#: memory comes back as workers finish jobs, not at once.
QUEUE_FULL_RETRY_AFTER_SECONDS = 30


def _queue_unavailable(exc: Exception) -> Response:
    log.warning("queue unavailable, answering 503: %s", exc)
    accepted = exc.accepted if isinstance(exc, QueueUnavailable) else {}
    if not accepted:
        return unavailable(
            "queue_unavailable", "Redis did not accept the work; nothing was enqueued."
        )
    response = unavailable(
        "queue_unavailable",
        "Redis failed part way: the requests listed in 'accepted' were enqueued, no other was.",
    )
    return _listed(response, accepted)


def _queue_full(exc: QueueFull) -> Response:
    log.warning("redis out of memory, answering 503: %s", exc)
    response = unavailable(
        "queue_full",
        "Redis is out of memory and refused the work; nothing was enqueued"
        + (" but the requests listed in 'accepted'." if exc.accepted else "."),
        retry_after=QUEUE_FULL_RETRY_AFTER_SECONDS,
    )
    return _listed(response, exc.accepted)


def _redis_full(exc: Exception) -> Response:
    return _queue_full(QueueFull(str(exc)))


def _outcome_unknown(exc: EnqueueOutcomeUnknown) -> Response:
    log.warning("enqueue unanswered, answering 504: %s", exc)
    response = unavailable(
        "enqueue_outcome_unknown",
        "Redis was sent the requests listed in 'unknown' and did not answer: they may or may "
        "not be enqueued. Sending the same requests again is safe (job ids are deterministic: "
        "a job already waiting, delayed or running is deduplicated).",
    )
    response.status_code = 504
    return _listed(
        response,
        exc.accepted,
        unknown=[{"index": i, "job_id": job_id} for i, job_id in sorted(exc.unknown.items())],
    )


def _listed(response: Response, accepted: dict[int, Any], **more: Any) -> Response:
    """``response`` with ``accepted`` (each request's index and answer) and ``more`` added
    to its body."""
    body = response.get_json()
    body["accepted"] = [
        {"index": index, **_answer(answer)} for index, answer in sorted(accepted.items())
    ]
    response.set_data(json.dumps({**body, **more}))
    return response


def _answer(answer: Any) -> dict[str, Any]:
    return {key: getattr(answer, key) for key in ("job_id", "outcome", "queue", "kind")}


def _database_unavailable(exc: Exception) -> Response:
    first_line = next(iter(str(exc).splitlines()), type(exc).__name__)
    log.warning("PostgreSQL unavailable, answering 503: %s", first_line)
    return unavailable("database_unavailable", "PostgreSQL is unreachable; retry later.")


def _database_refused(exc: Exception) -> Response:
    """A database error that is not a connection error: 503 when PostgreSQL refuses writes
    for now (``shared.outages``), otherwise raised again (a 500, reported)."""
    if is_infrastructure_outage(exc):
        return _database_unavailable(exc)
    raise exc


def _too_large(exc: RequestEntityTooLarge) -> Response:
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    return error_response(
        413, "payload_too_large", message=f"the body is over {limit} bytes", limit_bytes=limit
    )


def _http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTML errors as JSON; a 400 names the body as the bad field."""
    status = exc.code or 500
    if status == 400:
        return invalid_request({"body": exc.description or "bad request"})
    response = error_response(status, _snake(exc.name), message=exc.description)
    for header, value in exc.get_headers():
        if header.lower() not in ("content-type", "content-length"):
            response.headers[header] = value
    return response


def _internal_error(exc: InternalServerError) -> Response:
    # Flask has already logged the original exception and signalled it.
    return error_response(500, "internal_error")


def _snake(name: str) -> str:
    return name.lower().replace(" ", "_").replace("-", "_")


def register_error_handlers(app: Flask) -> None:
    """Answer every error of ``app`` in JSON."""
    app.register_error_handler(ValidationFailed, _validation_failed)
    app.register_error_handler(ConflictingFields, _conflicting_fields)
    app.register_error_handler(QueueUnavailable, _queue_unavailable)
    app.register_error_handler(QueueFull, _queue_full)
    app.register_error_handler(EnqueueOutcomeUnknown, _outcome_unknown)
    for error in REDIS_UNAVAILABLE:
        app.register_error_handler(error, _queue_unavailable)
    for error in REDIS_FULL:
        app.register_error_handler(error, _redis_full)
    for error in DATABASE_UNAVAILABLE:
        app.register_error_handler(error, _database_unavailable)
    app.register_error_handler(sqlalchemy.exc.DBAPIError, _database_refused)
    app.register_error_handler(psycopg.Error, _database_refused)
    app.register_error_handler(RequestEntityTooLarge, _too_large)
    app.register_error_handler(InternalServerError, _internal_error)
    app.register_error_handler(HTTPException, _http_error)
