"""gunicorn's error log, through ``AccessLog``, keeps a record on one line."""

from __future__ import annotations

import io
import logging

from gunicorn.config import Config

from services.app.api.access_log import AccessLog


def test_the_error_log_escapes_what_it_is_given() -> None:
    # gunicorn's error logger is process-wide: other tests of the process leave handlers on it
    shared = logging.getLogger("gunicorn.error")
    kept = list(shared.handlers)
    shared.handlers.clear()
    try:
        config = Config()
        config.set("errorlog", "-")
        log = AccessLog(config)
        stream = io.StringIO()
        [handler] = log.error_log.handlers
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        log.error("Invalid request from ip=%s: %s", "10.0.0.1", "GET /x\n[2026] [1] [ERROR] forged")
    finally:
        shared.handlers[:] = kept
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("GET /x\\n[2026] [1] [ERROR] forged")
