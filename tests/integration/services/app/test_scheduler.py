"""The tick scheduler against real Redis and PostgreSQL: slots, the leader lock, two replicas,
failover, pause flags, and the ``ticks`` / ``tick`` commands."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from router.enqueue import Enqueued
from router.ticks import Tick
from services.app.bootstrap import Platform
from services.app.cli import main
from services.app.cli.scheduler import manual_slot
from services.app.scheduler import (
    LeaderLock,
    TickScheduler,
    enqueue_tick,
    latest_fire_time,
    next_fire_time,
    tick_slot,
)
from tests import REPO
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform

LOCK_SECONDS = 1.5
AT = datetime(2026, 11, 29, 1, 0, 30, tzinfo=UTC)


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 29, hour, minute, second, tzinfo=UTC)


# -- slots (pure) --------------------------------------------------------------------------


def test_the_slot_is_the_latest_fire_time_within_the_grace() -> None:
    daily = Tick(name="daily", cron="0 1 * * *", run=lambda slot: None, description="")

    assert latest_fire_time(daily.cron, at(1, 0, 30), 300) == at(1, 0)
    assert tick_slot(daily, at(1, 0, 30), 300) == "2026-11-29T01:00Z"
    assert tick_slot(daily, at(1, 4), 300) == "2026-11-29T01:00Z"
    assert tick_slot(daily, at(1, 0), 300) == "2026-11-29T01:00Z"
    assert tick_slot(daily, at(1, 5, 1), 300) is None  # older than the grace: dropped
    assert tick_slot(daily, at(0, 59, 59), 300) is None
    assert daily.job_id("2026-11-29T01:00Z") == "daily-tick-2026-11-29T01:00Z"


def test_slots_of_frequent_and_stepped_crons() -> None:
    assert latest_fire_time("* * * * *", at(1, 4, 10), 300) == at(1, 4)
    assert latest_fire_time("*/10 * * * *", at(1, 29, 59), 900) == at(1, 20)
    assert latest_fire_time("5 * * * *", at(3, 9), 300) == at(3, 5)
    assert next_fire_time("0 4,20 * * *", at(4, 0, 1)) == at(20, 0)
    assert next_fire_time("0 1 * * *", at(1, 0)) == at(1, 0)


def test_manual_slot_names_the_second() -> None:
    assert manual_slot(at(1, 2, 3)) == "manual-2026-11-29T01:02:03Z"


# -- fixtures ------------------------------------------------------------------------------


class Recorder:
    """A tick body that records the slots it ran."""

    def __init__(self) -> None:
        self.slots: list[str] = []

    def __call__(self, slot: str) -> dict[str, str]:
        self.slots.append(slot)
        return {"slot": slot}


def scheduler_platform(
    make_platform: MakePlatform,
    *,
    pause_flag: str | None = None,
    recorder: Recorder | None = None,
) -> Platform:
    """The platform with a short leader lock and a ``test-tick`` that records its slots."""
    platform = make_platform(scheduler_lock_seconds=LOCK_SECONDS)
    platform.add_tick(
        Tick(
            name="test-tick",
            cron="* * * * *",
            run=recorder or Recorder(),
            description="records its slots",
            pause_flag=pause_flag,
        )
    )
    return platform


class Spy:
    """Records every enqueue answer a platform's router gives."""

    def __init__(self, platform: Platform) -> None:
        self.answers: list[Enqueued] = []
        original = platform.router.enqueue_many

        def enqueue_many(requests: Any) -> list[Enqueued]:
            answers = original(requests)
            self.answers.extend(answers)
            return answers

        platform.router.enqueue_many = enqueue_many  # type: ignore[method-assign]


@pytest.fixture
def platforms(make_platform: MakePlatform) -> Callable[..., Platform]:
    """Scheduler replicas: each call is another process's platform on the same namespace."""
    return functools.partial(scheduler_platform, make_platform)


class Running:
    """A TickScheduler running its BlockingScheduler in a thread."""

    def __init__(self, platform: Platform, clock: Callable[[], datetime] = lambda: AT) -> None:
        self.scheduler = TickScheduler(platform, clock=clock)
        self.thread = threading.Thread(
            target=self.scheduler.run, kwargs={"handle_signals": False}, daemon=True
        )

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.scheduler.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()

    def fire(self, name: str = "test-tick") -> None:
        """Make APScheduler run the tick's job now, as if its fire time had come."""
        h.wait_until(lambda: self.scheduler.scheduler.running, timeout=5)
        self.scheduler.scheduler.modify_job(name, next_run_time=datetime.now(UTC))


def queue_length(platform: Platform, family: str = "test_tick_tick") -> int:
    key = f"{platform.settings.redis_namespace}:{family}.maintenance"
    return int(platform.broker.client.llen(key))


def outcomes(*spies: Spy, kind: str = "tick:test-tick") -> list[str]:
    return sorted(answer.outcome for spy in spies for answer in spy.answers if answer.kind == kind)


# -- two replicas --------------------------------------------------------------------------


def test_two_schedulers_enqueue_one_tick_per_slot(platforms: Callable[..., Platform]) -> None:
    first, second = platforms(), platforms()
    spies = Spy(first), Spy(second)

    with Running(first) as a, Running(second) as b:
        h.wait_until(lambda: a.scheduler.is_leader or b.scheduler.is_leader, timeout=5)
        for _ in range(3):  # both replicas fire the same slot, three times over
            a.fire()
            b.fire()
            time.sleep(0.2)
        h.wait_until(lambda: len(outcomes(*spies)) >= 3, timeout=5)

        assert [a.scheduler.is_leader, b.scheduler.is_leader].count(True) == 1
        assert outcomes(*spies).count("added") == 1
        assert set(outcomes(*spies)) == {"added", "deduplicated"}
        assert queue_length(first) == 1
        record = first.broker.jobs.record("test-tick-tick-2026-11-29T01:00Z")
        assert record is not None and record["state"] == "waiting"


def test_only_one_scheduler_leads_at_a_time(platforms: Callable[..., Platform]) -> None:
    schedulers = [Running(platforms()), Running(platforms()), Running(platforms())]
    for running in schedulers:
        running.thread.start()
    try:
        deadline = time.monotonic() + 2 * LOCK_SECONDS
        leaders_seen: set[str] = set()
        while time.monotonic() < deadline:
            leading = [r.scheduler for r in schedulers if r.scheduler.is_leader]
            assert len(leading) <= 1
            leaders_seen |= {s.lock.token for s in leading}
            time.sleep(0.02)
        assert len(leaders_seen) == 1
    finally:
        for running in schedulers:
            running.stop()


def test_a_double_emission_of_one_slot_runs_once(
    platforms: Callable[..., Platform],
) -> None:
    recorder = Recorder()
    first, second = platforms(recorder=recorder), platforms(recorder=recorder)
    tick = first.tick("test-tick")
    barrier = threading.Barrier(2)
    answers: list[Enqueued] = []

    def emit(platform: Platform) -> None:
        barrier.wait()
        answers.append(enqueue_tick(platform, platform.tick("test-tick"), "2026-11-29T01:00Z"))

    threads = [threading.Thread(target=emit, args=(p,)) for p in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.outcome for a in answers) == ["added", "deduplicated"]

    queues = first.registry.queues_of_tier("maintenance")
    with h.serving(first.broker, queues, threads=1, drain=2):
        job_id = tick.job_id("2026-11-29T01:00Z")
        h.wait_until(lambda: h.state(first.broker, job_id) == "completed")
        # a late emission of the same slot, after it ran: still once
        assert enqueue_tick(second, tick, "2026-11-29T01:00Z").outcome == "deduplicated"
        time.sleep(0.3)
    assert recorder.slots == ["2026-11-29T01:00Z"]


# -- failover ------------------------------------------------------------------------------


def test_a_follower_takes_over_when_the_leader_stops(platforms: Callable[..., Platform]) -> None:
    first, second = platforms(), platforms()
    spy = Spy(second)
    with Running(first) as a:
        h.wait_until(lambda: a.scheduler.is_leader, timeout=5)
        with Running(second) as b:
            time.sleep(LOCK_SECONDS)
            assert not b.scheduler.is_leader

            a.stop()  # releases the lock
            h.wait_until(lambda: b.scheduler.is_leader, timeout=LOCK_SECONDS)
            assert b.scheduler.lock.holder() == b.scheduler.lock.token
            b.fire()
            h.wait_until(lambda: "deduplicated" in outcomes(spy), timeout=5)
    # the new leader caught up on the slot the old one had emitted: no second job
    assert queue_length(second) == 1


def test_a_crashed_leader_is_replaced_once_its_lock_expires(
    platforms: Callable[..., Platform], redis_client: redis.Redis, namespace: str
) -> None:
    crashed = LeaderLock(redis_client, f"{namespace}:scheduler:leader", LOCK_SECONDS)
    assert crashed.hold()  # then never renews, as a killed process would not
    started = time.monotonic()

    key = f"{namespace}:scheduler:leader"
    with Running(platforms()) as b:
        # while the crashed holder's lock lives (however long start-up took), b does not lead
        while redis_client.pttl(key) > 300:
            assert not b.scheduler.is_leader
            time.sleep(0.05)
        h.wait_until(lambda: b.scheduler.is_leader, timeout=LOCK_SECONDS * 3)
    assert time.monotonic() - started >= LOCK_SECONDS * 0.9


def test_the_lock_is_released_only_by_its_holder(redis_client: redis.Redis, namespace: str) -> None:
    key = f"{namespace}:scheduler:leader"
    mine, theirs = LeaderLock(redis_client, key, 5), LeaderLock(redis_client, key, 5)

    assert mine.hold() and mine.valid
    assert not theirs.hold() and not theirs.valid
    assert not theirs.release()
    assert mine.holder() == mine.token
    assert mine.hold()  # renewal
    assert mine.release()
    assert mine.holder() is None
    assert theirs.hold()


# -- pause flags ---------------------------------------------------------------------------


def test_a_paused_tick_is_not_enqueued(platforms: Callable[..., Platform]) -> None:
    flag = f"pause_api2_test_{uuid.uuid4().hex[:8]}"
    platform = platforms(pause_flag=flag)
    scheduler = TickScheduler(platform, clock=lambda: AT)
    platform.flags.set(flag, True)
    try:
        assert scheduler.refresh_leadership()
        assert scheduler.emit("test-tick") is None
        assert queue_length(platform) == 0

        platform.flags.set(flag, False)
        answer = scheduler.emit("test-tick")
        assert answer is not None and answer.outcome == "added"
        assert queue_length(platform) == 1
    finally:
        platform.flags.set(flag, False)
        scheduler.close()


def test_a_replica_that_does_not_lead_emits_nothing(
    platforms: Callable[..., Platform], redis_client: redis.Redis, namespace: str
) -> None:
    other = LeaderLock(redis_client, f"{namespace}:scheduler:leader", 30)
    assert other.hold()
    platform = platforms()
    scheduler = TickScheduler(platform, clock=lambda: AT)
    try:
        assert scheduler.emit("test-tick") is None
        assert queue_length(platform) == 0
    finally:
        scheduler.close()
        other.release()


def test_the_schedule_uses_utc_cron_with_grace_and_coalescing(
    platforms: Callable[..., Platform],
) -> None:
    scheduler = TickScheduler(platforms())
    try:
        job = scheduler.scheduler.get_job("test-tick")
        assert job.misfire_grace_time == 300
        assert job.coalesce is True
        assert job.max_instances == 1
        assert str(job.trigger.timezone) == "UTC"
        assert {j.id for j in scheduler.scheduler.get_jobs()} >= {"test-tick", "group-slot-reaper"}
    finally:
        scheduler.close()


# -- commands ------------------------------------------------------------------------------


def _env(redis_url: str, database_url: str, namespace: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
    }


def test_speedtier_tick_runs_the_reaper_now(
    redis_url: str, database_url: str, namespace: str
) -> None:
    env = _env(redis_url, database_url, namespace)
    runner = CliRunner()

    ran = runner.invoke(main, ["tick", "group-slot-reaper"], env=env)
    unknown = runner.invoke(main, ["tick", "no-such-tick"], env=env)

    assert ran.exit_code == 0, ran.output
    assert "group-slot-reaper manual-" in ran.output
    assert "done {'reaped': 0}" in ran.output
    assert unknown.exit_code == 1
    assert "unknown tick 'no-such-tick'" in unknown.output
    assert "group-slot-reaper" in unknown.output


def test_speedtier_ticks_lists_the_schedule(
    redis_url: str, database_url: str, namespace: str
) -> None:
    result = CliRunner().invoke(main, ["ticks"], env=_env(redis_url, database_url, namespace))

    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split()[:4] == ["NAME", "CRON", "NEXT", "(UTC)"]
    reaper = next(row for row in rows if row.startswith("group-slot-reaper"))
    assert "* * * * *" in reaper and " UTC " in reaper


@pytest.mark.slow
def test_speedtier_scheduler_process_leads_emits_and_releases_on_sigterm(
    redis_url: str, database_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    env = {**os.environ, **_env(redis_url, database_url, namespace)}
    process = subprocess.Popen(
        [sys.executable, "-m", "services.app.cli", "scheduler"],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
    )
    lock_key = f"{namespace}:scheduler:leader"
    reaper_queue = f"{namespace}:group_slot_reaper_tick.maintenance"
    try:
        # elected at start-up, it catches up on the reaper's current slot
        h.wait_until(lambda: redis_client.llen(reaper_queue) == 1, timeout=30)
        assert redis_client.get(lock_key) is not None
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert redis_client.get(lock_key) is None
    assert b"released the leader lock" in stderr
