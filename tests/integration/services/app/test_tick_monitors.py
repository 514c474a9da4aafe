"""Sentry cron monitors of ticks, against a local Sentry envelope receiver driven by the real
SDK: the scheduler's emission opens a check-in (``in_progress``) and the tick's job closes the
same check-in with ``ok`` or ``error``, every check-in carrying the tick's crontab and margins
as ``monitor_config``; a paused tick checks in ``ok`` at once; without Sentry nothing is sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import sentry_sdk

from router.tick_monitors import checkin_id
from router.ticks import Tick
from services.app.bootstrap import Platform
from services.app.scheduler import TickScheduler
from testkit.fakes.sentry_server import SentryInbox, fake_sentry
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform

AT = datetime(2026, 11, 29, 1, 0, 20, tzinfo=UTC)
SLOT = "2026-11-29T01:00Z"


@pytest.fixture
def inbox() -> Iterator[SentryInbox]:
    """The real SDK's client bound to the receiver for this test only."""
    with fake_sentry() as (dsn, received):
        client = sentry_sdk.Client(dsn=dsn, default_integrations=False)
        scope = sentry_sdk.get_global_scope()
        previous = scope.client
        scope.set_client(client)
        try:
            yield received
        finally:
            client.flush(timeout=5)
            scope.set_client(previous if previous.is_active() else None)
            client.close()


def flushed(inbox: SentryInbox) -> list[dict[str, Any]]:
    """The check-ins of the test's tick (an election also catches up on every other tick)."""
    sentry_sdk.flush(timeout=5)
    return [c for c in inbox.checkins() if c["monitor_slug"] == "hourly-sweep"]


@contextmanager
def maintenance_worker(platform: Platform) -> Iterator[None]:
    """A real worker over the maintenance tier's queues, in a thread."""
    queues = platform.registry.queues_of_tier("maintenance")
    with h.serving(platform.brokers.of_tier("maintenance"), queues, threads=1):
        yield


def platform_with(make_platform: MakePlatform, run: Any, pause_flag: str | None = None) -> Platform:
    platform = make_platform(sentry_checkin_margin_minutes=7, sentry_max_runtime_minutes=45)
    platform.add_tick(
        Tick(name="hourly-sweep", cron="0 * * * *", run=run, description="", pause_flag=pause_flag)
    )
    return platform


def tick_job(platform: Platform, slot: str) -> None:
    """What a worker runs for the slot: the tick family's handler."""
    family = platform.registry.by_name()["hourly_sweep_tick"]
    family.handler(slot)


EXPECTED_CONFIG = {
    "schedule": {"type": "crontab", "value": "0 * * * *"},
    "timezone": "UTC",
    "checkin_margin": 7,
    "max_runtime": 45,
}


def test_emission_opens_and_the_tick_job_closes_one_checkin(
    make_platform: MakePlatform, inbox: SentryInbox
) -> None:
    # Given a platform with an hourly tick
    platform = platform_with(make_platform, run=lambda slot: {"swept": 3})
    scheduler = TickScheduler(platform, clock=lambda: AT)
    try:
        # When the scheduler, elected at 01:00:20, emits the 01:00 slot (its catch-up)
        assert scheduler.refresh_leadership()
        record = platform.brokers.record(f"hourly-sweep-tick-{SLOT}")
        assert record is not None and record["state"] == "waiting"
        # and a worker runs the slot's job
        tick_job(platform, SLOT)
    finally:
        scheduler.close()
    # Then Sentry got in_progress then ok, for one check-in of the tick's monitor
    checkins = flushed(inbox)
    assert [c["status"] for c in checkins] == ["in_progress", "ok"]
    expected_id = checkin_id(platform.tick("hourly-sweep"), SLOT)
    for checkin in checkins:
        assert checkin["monitor_slug"] == "hourly-sweep"
        assert checkin["check_in_id"] == expected_id
        assert checkin["monitor_config"] == EXPECTED_CONFIG


def test_a_slot_emitted_again_after_its_run_does_not_reopen_the_checkin(
    make_platform: MakePlatform, inbox: SentryInbox
) -> None:
    # Given the 01:00 slot emitted and its job run by a worker (in_progress, then ok)
    platform = platform_with(make_platform, run=lambda slot: None)
    first = TickScheduler(platform, clock=lambda: AT)
    try:
        assert first.refresh_leadership()
    finally:
        first.close()
    job_id = f"hourly-sweep-tick-{SLOT}"
    with maintenance_worker(platform):
        h.wait_until(lambda: (platform.brokers.record(job_id) or {}).get("state") == "completed")
    # When a restarted scheduler catches up on the same slot within the grace period
    second = TickScheduler(platform, clock=lambda: AT)
    try:
        assert second.refresh_leadership()
    finally:
        second.close()
    # Then the closed check-in stays closed
    assert [c["status"] for c in flushed(inbox)] == ["in_progress", "ok"]


def test_a_failing_tick_job_checks_in_error_and_still_raises(
    make_platform: MakePlatform, inbox: SentryInbox
) -> None:
    def boom(slot: str) -> None:
        raise RuntimeError("sweep failed")

    platform = platform_with(make_platform, run=boom)
    with pytest.raises(RuntimeError, match="sweep failed"):
        tick_job(platform, SLOT)
    (checkin,) = flushed(inbox)
    assert checkin["status"] == "error"
    assert checkin["check_in_id"] == checkin_id(platform.tick("hourly-sweep"), SLOT)


def test_a_paused_tick_checks_in_ok_from_the_scheduler(
    make_platform: MakePlatform, inbox: SentryInbox
) -> None:
    flag = f"pause_api2_test_{uuid.uuid4().hex[:8]}"
    platform = platform_with(make_platform, run=lambda slot: None, pause_flag=flag)
    platform.flags.set(flag, True)
    scheduler = TickScheduler(platform, clock=lambda: AT)
    try:
        assert scheduler.refresh_leadership()  # (its catch-up meets the raised flag)
    finally:
        scheduler.close()
    assert [c["status"] for c in flushed(inbox)] == ["ok"]


def test_without_a_sentry_client_nothing_is_sent(make_platform: MakePlatform) -> None:
    with fake_sentry() as (_dsn, received):
        platform = platform_with(make_platform, run=lambda slot: None)
        tick_job(platform, SLOT)
        sentry_sdk.flush(timeout=2)
        assert received.checkins() == []
