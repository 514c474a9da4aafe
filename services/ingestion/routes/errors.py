"""How the ingestion API answers its errors: 404 for a missing (or another tenant's)
record, 409 for a busy document or a connection conflict (name taken, still bound), 413
for content or a body over its limit, 503 with ``Retry-After`` when the embedding provider
is busy or no connector credentials key is configured."""

from __future__ import annotations

import logging
import math
import time

from flask import Blueprint, Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from services.apikit.errors import RETRY_AFTER_SECONDS, error_response, unavailable
from services.ingestion import store
from shared.credentials import CredentialsKeyMissing
from shared.db.models.ingestion import MAX_SOURCE_BYTES
from shared.errors import Delay, RecordMissing, Retryable

log = logging.getLogger(__name__)


def _not_found(exc: RecordMissing) -> Response:
    return error_response(404, "not_found", message=str(exc))


def _busy(exc: store.DocumentBusy) -> Response:
    return error_response(409, "conflict", message=str(exc))


def _content_too_large(exc: store.DocumentTooLarge) -> Response:
    return error_response(
        413, "payload_too_large", message="content over 10 MB", limit_bytes=MAX_SOURCE_BYTES
    )


def _body_too_large(exc: RequestEntityTooLarge) -> Response:
    limit = request.max_content_length
    return error_response(
        413, "payload_too_large", message=f"the body is over {limit} bytes", limit_bytes=limit
    )


def _embedder_unavailable(exc: Delay | Retryable) -> Response:
    log.warning("embedder unavailable, answering 503: %s", exc)
    wait = RETRY_AFTER_SECONDS
    if isinstance(exc, Delay):
        wait = max(1, math.ceil(exc.until - time.time()))
    return unavailable("embedder_unavailable", "the embedding provider is busy; retry later", wait)


def _conflict(exc: Exception) -> Response:
    return error_response(409, "conflict", message=str(exc))


def _no_credentials_key(exc: CredentialsKeyMissing) -> Response:
    log.error("connection credentials refused: %s", exc)
    return unavailable("credentials_key_missing", str(exc), RETRY_AFTER_SECONDS)


def register_error_handlers(routes: Blueprint) -> None:
    routes.register_error_handler(RecordMissing, _not_found)
    routes.register_error_handler(store.DocumentBusy, _busy)
    routes.register_error_handler(store.DocumentTooLarge, _content_too_large)
    routes.register_error_handler(RequestEntityTooLarge, _body_too_large)
    routes.register_error_handler(Delay, _embedder_unavailable)
    routes.register_error_handler(Retryable, _embedder_unavailable)
    routes.register_error_handler(store.ConnectionInUse, _conflict)
    routes.register_error_handler(store.ConnectionNameTaken, _conflict)
    routes.register_error_handler(CredentialsKeyMissing, _no_credentials_key)
