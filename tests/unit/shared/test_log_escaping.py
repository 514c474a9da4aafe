"""One record, one line, in every log format: a value carrying a newline (a request path with
``%0a``, a provider's answer) cannot forge a record (``shared.observability``)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from shared.observability import escape_controls, job_logging, log_handler

FORGED = "/internal/x\n2026-12-06 12:00:00,000 ERROR 1 speedtier: forged\r\x1b[31mred\u2028next"


@pytest.fixture(params=[False, True], ids=["text", "json"])
def logged(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger(f"speedtier.test.escaping.{request.param}")
    logger.propagate = False
    handler = log_handler(json_lines=request.param, stream=stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.removeHandler(handler)


def test_a_value_with_line_breaks_stays_on_its_record_s_line(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    with job_logging(job_id="j\nERROR forged", family="f", tier="fast", attempt=1):
        logger.warning("rejected a wrong bearer token for %s %s", "GET", FORGED)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "\x1b" not in lines[0]
    assert not lines[0].startswith("2026-12-06 12:00:00,000 ERROR")


def test_the_text_format_shows_what_was_escaped() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("speedtier.test.escaping.shown")
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=False, stream=stream))
    logger.warning("path %s", "/a\nb\\nc\td\x00\x85")
    line = stream.getvalue().rstrip("\n")
    assert line.endswith(r"path /a\nb\\nc\td\x00\x85")


def test_a_traceback_follows_indented() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("speedtier.test.escaping.traceback")
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=False, stream=stream))
    try:
        raise ValueError("bad\n2026-12-06 12:00:00,000 ERROR 1 speedtier: forged")
    except ValueError:
        logger.exception("failed")
    first, *rest = stream.getvalue().rstrip("\n").split("\n")
    assert first.endswith("failed")
    assert rest and all(line.startswith("    ") for line in rest)


def test_json_lines_keep_the_value_exactly() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("speedtier.test.escaping.json")
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=True, stream=stream))
    logger.warning("%s", FORGED)
    assert json.loads(stream.getvalue())["message"] == FORGED


def test_escape_controls_is_unambiguous() -> None:
    assert escape_controls("a\\nb") != escape_controls("a\nb")
    assert escape_controls("plain text: é ü 中") == "plain text: é ü 中"
