"""A consumer reports a Redis outage once, then every REPEAT_SECONDS, and once at its end."""

from __future__ import annotations

import logging

import pytest

from tiers.outage_log import OutageLog, SharedOutage

LOGGER = logging.getLogger("test.outage_log")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_an_outage_warns_once_then_every_repeat_period_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [100.0]
    log = OutageLog(LOGGER, "consumer of q.fast", clock=lambda: clock[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    # Given Redis failing every 0.5 s for 40 s
    for _ in range(80):
        log.failed("cannot reach redis", ConnectionError("refused"))
        clock[0] += 0.5
    # Then two warnings (the first failure, and 30 s later), the rest at debug level
    assert len(warnings(caplog)) == 2
    assert "1 attempt(s) in 0 s" in warnings(caplog)[0]
    assert "61 attempt(s) in 30 s" in warnings(caplog)[1]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 78
    # When Redis answers: one warning naming the outage, and the count starts again
    log.recovered()
    assert "after 80 failed attempt(s) in 40.0 s" in warnings(caplog)[2]
    log.recovered()
    log.failed("cannot reach redis", ConnectionError("refused"))
    assert len(warnings(caplog)) == 4
    assert "1 attempt(s) in 0 s" in warnings(caplog)[3]


def test_recovered_without_an_outage_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    OutageLog(LOGGER, "consumer of q.fast").recovered()
    assert caplog.records == []


def test_a_shared_outage_warns_once_for_all_its_members_and_ends_with_the_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    shared = SharedOutage(LOGGER, "worker consumers", clock=lambda: clock[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    # Given twelve consumers failing every 0.1 s for 2 s
    for _ in range(20):
        for n in range(12):
            shared.failed(f"q{n}", "cannot reach redis", ConnectionError("refused"))
        clock[0] += 0.1
    # Then one warning; and the outage ends when the last consumer answers, not the first
    assert len(warnings(caplog)) == 1
    for n in range(11):
        shared.recovered(f"q{n}")
    assert len(warnings(caplog)) == 1
    shared.recovered("q11")
    assert len(warnings(caplog)) == 2
    assert "reached redis again after 240 failed attempt(s)" in warnings(caplog)[-1]
