"""Kill switches in Flipper's tables, read at execution by real workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from router.requests import JobRequest
from services.app.bootstrap import Platform
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform

FLAG = "pause_api2_test_family"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Iterator[Platform]:
    """The harness's families alone, the kill switch lowered afterwards (flags are rows in
    the shared test database)."""
    platform = make_platform(services=["tests.platform_harness"])
    yield platform
    platform.flags.set(FLAG, False)


def test_pause_raised_after_enqueue_skips_the_job_and_resume_lets_new_work_run(
    platform: Platform, redis_client: redis.Redis, namespace: str
) -> None:
    # Given a queued job
    platform.router.enqueue(JobRequest("t_paused", 3, {"item": "p"}))
    # When the kill switch is raised before a worker gets to it
    platform.flags.set(FLAG, True)
    assert platform.flags.is_enabled(FLAG)
    with h.running_worker(platform.broker):
        # Then it completes as skipped without running
        h.wait_until(lambda: h.state(platform.broker, "paused-p") == "skipped")
        assert redis_client.get(f"{namespace}:runs:p") is None
        # And after resume, new work for the same id runs
        platform.flags.set(FLAG, False)
        again = platform.router.enqueue(JobRequest("t_paused", 3, {"item": "p"}))
        assert again.outcome == "replaced"
        h.wait_until(lambda: h.state(platform.broker, "paused-p") == "completed")
    assert redis_client.get(f"{namespace}:runs:p") == b"1"


def test_environment_override_wins_over_the_table(platform: Platform) -> None:
    platform.flags.overrides[FLAG] = True
    assert platform.flags.is_enabled(FLAG)
    platform.flags.overrides[FLAG] = False
    platform.flags.set(FLAG, True)
    assert not platform.flags.is_enabled(FLAG)
