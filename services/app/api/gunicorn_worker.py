"""gunicorn's own refusals, answered in the API's JSON like every other error.

gunicorn refuses some requests before the app sees them (a request line over
``limit_request_line``, 4094 bytes by default; too many or too large headers; a malformed
request line or header) and answers them with an HTML page. :class:`JsonErrorsWorker` is
gunicorn's gthread worker (as ``services.app.api.thread_loop`` runs it) answering those in
JSON instead:

=================================  ======  ===============================================
refusal                            status  body
=================================  ======  ===============================================
request line over the limit        414     ``{"error": "uri_too_long", ...}``
header fields over the limits      431     ``{"error": "request_header_fields_too_large"}``
transfer coding it cannot read     501     ``{"error": "not_implemented", ...}``
a forbidden proxy request          403     ``{"error": "forbidden", ...}``
anything else malformed            400     ``{"error": "invalid_request", "fields":
                                           {"request": message}}``
=================================  ======  ===============================================

Serve with ``worker_class = "services.app.api.gunicorn_worker.JsonErrorsWorker"``.
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn import util
from gunicorn.http.errors import (
    ForbiddenProxyRequest,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseException,
    UnsupportedTransferCoding,
)

from services.app.api.thread_loop import LeanThreadWorker

WORKER_CLASS = f"{__name__}.JsonErrorsWorker"

_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}


def refusal(exc: BaseException) -> tuple[int, dict[str, Any]] | None:
    """The status and JSON body for a request gunicorn refused, or None for any other
    failure (left to gunicorn)."""
    if not isinstance(exc, ParseException):
        return None
    message = str(exc)
    if isinstance(exc, LimitRequestLine):
        return 414, {"error": "uri_too_long", "message": message}
    if isinstance(exc, LimitRequestHeaders):
        return 431, {"error": "request_header_fields_too_large", "message": message}
    if isinstance(exc, UnsupportedTransferCoding):
        return 501, {"error": "not_implemented", "message": message}
    if isinstance(exc, ForbiddenProxyRequest):
        return 403, {"error": "forbidden", "message": message}
    return 400, {"error": "invalid_request", "fields": {"request": message}}


def response_bytes(status: int, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode("latin-1") + payload


class JsonErrorsWorker(LeanThreadWorker):
    """gunicorn's gthread worker (its loop's bookkeeping constant per request:
    ``services.app.api.thread_loop``), with its request refusals in JSON."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = refusal(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            util.write_nonblock(client, response_bytes(*answer))
        except Exception:  # the client may be gone; nothing to tell it then
            self.log.debug("Failed to send error message.")
