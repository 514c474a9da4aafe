"""This host's clock against Redis's: measured with ``TIME`` on a real redis-server, refused at
start in production and staging when off by more than the limit, reported by a worker's
periodic check, and refused for a real process whose clock is shifted (libfaketime)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from shared import metrics
from shared.clock_offset import (
    ClockOffsetTooLarge,
    ClockWatch,
    TimeRefused,
    offset_limit,
    read_offset,
)
from shared.config import Settings, load_settings
from shared.redis_persistence import WARNED_ENV, verify_redis_persistence
from testkit.faketime import shifted_clock_env
from testkit.ports import free_port
from tests.fixtures_platform import CREDENTIALS_KEY
from tests.fixtures_redis import MakeRedisServer
from tests.integration.shared.test_redis_persistence import command_env, speedtier


def settings_of(**values: object) -> Settings:
    """Settings as production reads them; the test's Redis has no AOF, which they allow."""
    return load_settings(
        connector_credentials_key=CREDENTIALS_KEY, allow_volatile_redis=True, **values
    )


def shifted(seconds: float) -> Callable[[], float]:
    """A wall clock ``seconds`` ahead of this host's (behind when negative)."""
    return lambda: time.time() + seconds


@pytest.fixture(autouse=True)
def not_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WARNED_ENV, raising=False)


def test_a_reading_finds_the_offset_within_half_its_round_trip(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    same_host = read_offset(client)
    ahead = read_offset(client, shifted(30.0))
    behind = read_offset(client, shifted(-7.5))
    client.close()

    # Redis runs on this host: the same clock, seen across a round trip
    assert 0 < same_host.round_trip_seconds < 0.5
    assert abs(same_host.offset_seconds) <= same_host.round_trip_seconds / 2 + 0.001
    assert same_host.least_offset <= 0.001
    assert ahead.offset_seconds == pytest.approx(30.0, abs=ahead.round_trip_seconds / 2 + 0.001)
    assert behind.offset_seconds == pytest.approx(-7.5, abs=behind.round_trip_seconds / 2 + 0.001)


def test_the_limit_leaves_two_hosts_room_in_the_leases_and_the_heartbeats() -> None:
    assert offset_limit(load_settings()) == 2.0
    # 3/8 of a lease: half of the three quarters a lease refreshed every quarter leaves
    assert offset_limit(load_settings(group_lease_seconds=4.0)) == 1.5
    # 1/4 of the heartbeat timeout: half of the half it leaves a host (tiers.beat_log)
    assert offset_limit(load_settings(heartbeat_timeout_seconds=4.0)) == 1.0
    assert offset_limit(load_settings(max_clock_offset_seconds=0.25)) == 0.25


@pytest.mark.parametrize("environment", ["production", "staging"])
@pytest.mark.parametrize("offset, direction", [(5.0, "ahead of"), (-5.0, "behind")])
def test_production_and_staging_refuse_to_start_on_a_clock_off_redis(
    redis_url: str, environment: str, offset: float, direction: str
) -> None:
    settings = settings_of(redis_url=redis_url, environment=environment)
    with pytest.raises(ClockOffsetTooLarge, match=f"5.0[0-9]* s {direction} the clock of Redis"):
        verify_redis_persistence(settings, clock=shifted(offset))
    # within the limit (2 s), and the limit raised past the offset: it starts
    verify_redis_persistence(settings, clock=shifted(1.5))
    raised = settings_of(redis_url=redis_url, environment=environment, max_clock_offset_seconds=6.0)
    verify_redis_persistence(raised, clock=shifted(offset))


def test_development_warns_once_and_starts(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(redis_url=redis_url, environment="development")
    for _ in range(2):
        verify_redis_persistence(settings, clock=shifted(-3.0))
    warned = [r.getMessage() for r in caplog.records if "the clock of Redis" in r.getMessage()]
    assert len(warned) == 1 and "3.0" in warned[0] and "behind" in warned[0]


def offset_on_the_gauge() -> float:
    body, _content_type = metrics.render()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "speedtier_clock_offset_seconds":
                return float(sample.value)
    raise AssertionError("no speedtier_clock_offset_seconds")


def test_the_periodic_check_reports_a_clock_that_drifts_off_and_back(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    offset, monotonic = [0.0], [0.0]
    watch = ClockWatch(
        settings_of(redis_url=redis_url, environment="production"),
        every=60,
        clock=lambda: time.time() + offset[0],
        monotonic=lambda: monotonic[0],
    )
    # The first beat reads at once: on time, nothing logged, the gauge near 0
    watch.tick()
    assert abs(offset_on_the_gauge()) < 0.05
    assert not [r for r in caplog.records if r.name == "shared.clock_offset"]
    # Given the host's clock jumps 40 s ahead while the worker runs
    offset[0] = 40.0
    watch.tick()  # not due yet
    assert abs(offset_on_the_gauge()) < 0.05
    # When the check is due, twice
    for _ in range(2):
        monotonic[0] += 61
        watch.tick()
    # Then one ERROR says so, and the gauge shows it
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "40.0" in errors[0].getMessage()
    assert "ahead of" in errors[0].getMessage()
    assert offset_on_the_gauge() == pytest.approx(40.0, abs=0.05)
    # and one line when it is back
    offset[0] = 0.0
    monotonic[0] += 61
    watch.tick()
    assert "back within 2 s" in caplog.records[-1].getMessage()
    assert abs(offset_on_the_gauge()) < 0.05


def test_a_redis_that_does_not_answer_is_not_judged(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    watch = ClockWatch(settings_of(redis_url=url, environment="production"), clock=shifted(40))
    assert watch.check() is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def time_refused(make_redis_server: MakeRedisServer) -> str:
    """The URL of a Redis user whose ACL allows every command but TIME."""
    url = make_redis_server()
    admin = redis.Redis.from_url(url)
    admin.acl_setuser(
        "no-time",
        enabled=True,
        passwords=["+secret"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-time"],
    )
    admin.close()
    return url.replace("redis://", "redis://no-time:secret@")


def test_a_redis_that_refuses_time_is_refused_in_production_and_warned_about_elsewhere(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = time_refused(make_redis_server)
    # (the user reaches Redis, and its scripts cannot read the clock: TIME is what they call)
    client = redis.Redis.from_url(url)
    with pytest.raises(redis.ResponseError, match="can't run this command"):
        client.eval("return redis.call('time')", 0)
    client.close()
    with pytest.raises(TimeRefused, match="refuses TIME"):
        verify_redis_persistence(settings_of(redis_url=url, environment="production"))
    verify_redis_persistence(load_settings(redis_url=url, environment="development"))
    assert any("refuses TIME" in r.getMessage() for r in caplog.records)
    # and a worker's periodic reading leaves it unjudged, without failing
    assert ClockWatch(settings_of(redis_url=url, environment="production")).check() is None


@pytest.mark.slow
def test_a_production_worker_on_a_host_whose_clock_is_off_refuses_to_start(
    make_redis_server: MakeRedisServer, database_url: str, tmp_path: Path
) -> None:
    url = make_redis_server("--appendonly", "yes")
    env = command_env(url, database_url, tmp_path, SPEEDTIER_ENV="production")

    # A worker pool on a host 10 s ahead of Redis: its parent refuses before any child
    ahead = speedtier(
        "worker", "--tier", "maintenance", "--processes", "2", env=env | shifted_clock_env("+10s")
    )
    assert ahead.returncode == 1, ahead.stderr[-2000:]
    assert "Error: refusing to start in SPEEDTIER_ENV=production" in ahead.stderr
    assert "s ahead of the clock of Redis" in ahead.stderr
    assert "Traceback" not in ahead.stderr
    assert "started maintenance-" not in ahead.stderr
    # The scheduler 10 s behind: the same
    behind = speedtier("scheduler", env=env | shifted_clock_env("-10s"))
    assert behind.returncode == 1, behind.stderr[-2000:]
    assert "s behind the clock of Redis" in behind.stderr
