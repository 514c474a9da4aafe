"""gunicorn's error log, through ``AccessLog``, keeps a record on one line."""

from __future__ import annotations

import io
import logging

from gunicorn.config import Config

from services.app.api.access_log import AccessLog


def test_the_error_log_escapes_what_it_is_given() -> None:
    config = Config()
    config.set("errorlog", "-")
    log = AccessLog(config)
    stream = io.StringIO()
    for handler in log.error_log.handlers:
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
    log.error("Invalid request from ip=%s: %s", "10.0.0.1", "GET /x\n[2026] [1] [ERROR] forged")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("GET /x\\n[2026] [1] [ERROR] forged")
