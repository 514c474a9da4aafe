"""Structured logs: a record logged while a job runs carries the job's id, family,
organization, tier and attempt, one JSON object per line; outside a job it carries none."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import redis

from router.enqueue import Router
from router.requests import JobRequest
from shared.observability import job_logging, log_handler
from tests import platform_harness as h
from tiers.broker import TierBroker


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """JSON lines of the ``tiers`` loggers, as production writes them."""
    stream = io.StringIO()
    handler = log_handler(json_lines=True, stream=stream)
    logger = logging.getLogger("tiers")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(previous)


def entries(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_retried_jobs_lines_carry_its_identity(
    router: Router, broker: TierBroker, redis_client: redis.Redis, json_lines: io.StringIO
) -> None:
    # Given a job that fails with a retryable error until its attempts run out
    router.enqueue(JobRequest("t_plain", 42, {"item": "logged", "mode": "retryable"}))
    # When a real worker runs it
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-logged") == "failed", timeout=30)
    # Then the outcome's retry lines are JSON with the job's fields, one per attempt
    retries = [e for e in entries(json_lines) if "retrying in" in str(e["message"])]
    assert [e["attempt"] for e in retries] == [1, 2]
    for entry in retries:
        assert entry["job_id"] == "plain-logged"
        assert entry["family"] == "t_plain"
        assert entry["organization"] == "42"
        assert entry["tier"] == "fast"
        assert entry["level"] == "INFO"
        assert entry["logger"] == "tiers.middleware.outcomes"


def test_a_retried_failure_is_no_unhandled_exception_and_its_end_is_an_error(
    router: Router, broker: TierBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a job whose every attempt ends with a classified, retryable failure
    router.enqueue(JobRequest("t_plain", 7, {"item": "quiet", "mode": "retryable"}))
    # When a real worker runs it until its attempts run out
    with caplog.at_level(logging.INFO), h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-quiet") == "failed", timeout=30)
    ours = [r for r in caplog.records if "quiet" in r.getMessage() or r.name.startswith("dramatiq")]
    # Then no line carries a traceback (Dramatiq's "unhandled exception" is gone)
    assert not [r for r in ours if r.exc_info], [r.getMessage() for r in ours if r.exc_info]
    assert not [r for r in ours if "unhandled exception" in r.getMessage()]
    # and the last attempt is one ERROR line naming the job and its error
    errors = [r.getMessage() for r in ours if r.levelno >= logging.ERROR]
    assert errors == ["job plain-quiet failed after 3 attempt(s): Retryable: provider said 503"]


def test_an_unexpected_exception_keeps_its_traceback(
    router: Router, broker: TierBroker, caplog: pytest.LogCaptureFixture
) -> None:
    router.enqueue(JobRequest("t_plain", 7, {"item": "loud", "mode": "crash"}))
    with caplog.at_level(logging.INFO), h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-loud") == "failed", timeout=30)
    tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith("dramatiq")]
    assert len(tracebacks) == 3  # one per attempt: a bug is not an expected outcome


def test_lines_outside_a_job_carry_no_job_fields() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("speedtier.test.log_context")
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=True, stream=stream))
    logger.setLevel(logging.INFO)
    with job_logging(job_id="j-1", family="f", organization="7", tier="slow", attempt=3):
        logger.info("inside")
    logger.warning("outside")
    inside, outside = entries(stream)
    assert inside["message"] == "inside" and inside["attempt"] == 3 and inside["tier"] == "slow"
    assert outside["message"] == "outside" and outside["level"] == "WARNING"
    assert not {"job_id", "family", "organization", "tier", "attempt"} & outside.keys()


def test_readable_lines_in_development_show_the_job_in_brackets() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("speedtier.test.log_context.text")
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=False, stream=stream))
    logger.setLevel(logging.INFO)
    with job_logging(job_id="j-2", family="f", organization=None, tier="fast", attempt=1):
        logger.info("hello")
    line = stream.getvalue().strip()
    assert line.endswith("hello [job_id=j-2 family=f tier=fast attempt=1]")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)
