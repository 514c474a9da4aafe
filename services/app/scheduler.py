"""The tick scheduler: APScheduler 3 cron jobs in UTC, one emitter at a time.

Each tick a service registers (``platform.add_tick``) becomes an APScheduler job with a UTC
``CronTrigger``. Firing does not run the tick body: it enqueues the tick's job with the slot
id of the fire time (``<name>-tick-2026-11-29T01:00Z``) on the maintenance tier, where a
worker runs it.

Running two replicas is safe, by two independent guards:

- **Leader lock.** ``SET <ns>:scheduler:leader <uuid> NX PX <lock ms>``, renewed every third
  of its lifetime by a compare-and-pexpire script and released on shutdown by a
  compare-and-delete, so only the holder emits. A replica that stops renewing (killed,
  partitioned) loses the lock when it expires and another takes over.
- **Slot ids.** A tick family keeps finished ids for its retention, so the same slot enqueued
  twice (two leaders across a lock expiry, a restart, a failover's catch-up) runs once.

Missed fire times:

- ``misfire_grace_time`` (``SPEEDTIER_SCHEDULER_MISFIRE_GRACE_SECONDS``, default 300): a fire
  time the scheduler notices late (the process was busy, suspended or restarting within the
  same process) still runs if it is at most this old; older ones are dropped.
- ``coalesce=True``: several missed fire times of one tick run once, as the latest.
- On becoming leader (at start-up and on failover) the scheduler emits each tick's most recent
  slot that is within the grace period, so a leader that died just before a fire time does
  not lose that tick; the slot id makes this a no-op when the old leader had emitted it.

The tick's pause flag is read before emitting (and the worker reads it again at execution).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

import redis
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from redis.backoff import NoBackoff
from redis.retry import Retry

from router.enqueue import Enqueued
from router.requests import JobRequest
from router.tick_monitors import check_in
from router.ticks import Tick
from services.app.bootstrap import Platform
from shared import heartbeat, metrics
from shared.db.base import utcnow
from tiers.job_store import FINISHED_STATES

log = logging.getLogger(__name__)

TICKS = metrics.counter(
    "ticks", "Tick emissions by tick and the enqueue's answer (or paused).", ["tick", "outcome"]
)

Clock = Callable[[], datetime]

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


def cron_trigger(cron: str) -> CronTrigger:
    """A crontab expression as an APScheduler trigger evaluated in UTC."""
    return CronTrigger.from_crontab(cron, timezone=UTC)


def latest_fire_time(cron: str, now: datetime, grace_seconds: float) -> datetime | None:
    """The most recent fire time of ``cron`` at or before ``now``, if it is at most
    ``grace_seconds`` old.

    APScheduler 3 does not tell a job which fire time it runs for; this recovers it. With
    ``0 1 * * *``, both 01:00:30 and (grace 300) 01:04 give 01:00.
    """
    trigger = cron_trigger(cron)
    fire: datetime | None = trigger.get_next_fire_time(None, now - timedelta(seconds=grace_seconds))
    latest = None
    while fire is not None and fire <= now:
        latest = fire
        fire = trigger.get_next_fire_time(fire, fire)
    return latest


#: How far back :func:`previous_fire_time` looks, widening: a minute, an hour, a day, a week, a
#: year (each step a few trigger evaluations for a schedule that fires within it).
_LOOKBACKS = (120.0, 3600.0, 86_400.0, 8 * 86_400.0, 366 * 86_400.0)


def previous_fire_time(cron: str, now: datetime) -> datetime | None:
    """The most recent fire time of ``cron`` at or before ``now``, however old (up to a
    year), found in a few evaluations whatever the schedule."""
    for lookback in _LOOKBACKS:
        fire = latest_fire_time(cron, now, lookback)
        if fire is not None:
            return fire
    return None


def next_fire_time(cron: str, now: datetime) -> datetime | None:
    """The first fire time of ``cron`` at or after ``now``."""
    fire: datetime | None = cron_trigger(cron).get_next_fire_time(None, now)
    return fire


def tick_slot(tick: Tick, now: datetime, grace_seconds: float) -> str | None:
    """The slot id (``2026-11-29T01:00Z``) a tick firing at ``now`` stands for, or None
    when no fire time is within the grace period."""
    fire = latest_fire_time(tick.cron, now, grace_seconds)
    return tick.slot(fire) if fire is not None else None


def emissions_key(platform: Platform) -> str:
    """The hash of each tick's last emission: tick name -> JSON (slot, outcome, at)."""
    return f"{platform.settings.redis_namespace}:scheduler:emissions"


def enqueue_tick(platform: Platform, tick: Tick, slot: str) -> Enqueued:
    """Enqueue one slot of a tick through the router (deduplicated by the slot id)."""
    request = JobRequest(kind=tick.kind, organization_id=None, params={"slot": slot})
    return platform.router.enqueue_many([request])[0]


class LeaderLock:
    """A Redis lock with a lifetime, held by whoever set it and renewed by its holder.

    Parameters:
      client: a Redis client (with short timeouts: a hung call must fail before the lock
        could expire).
      key: the lock's key.
      ttl_seconds: the lock's lifetime; the holder renews it every third of that.
    """

    def __init__(self, client: redis.Redis, key: str, ttl_seconds: float) -> None:
        self.client = client
        self.key = key
        self.ttl_seconds = ttl_seconds
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.token = uuid.uuid4().hex
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._valid_until = 0.0

    def hold(self) -> bool:
        """Renew the lock if this holder has it, else take it if it is free."""
        asked_at = time.monotonic()
        held = bool(self._renew(keys=[self.key], args=[self.token, self.ttl_ms])) or bool(
            self.client.set(self.key, self.token, nx=True, px=self.ttl_ms)
        )
        # Counted from before the call: the lock cannot expire earlier than that.
        self._valid_until = asked_at + self.ttl_seconds if held else 0.0
        return held

    @property
    def valid(self) -> bool:
        """Whether the last successful ``hold`` still guarantees the lock (a local clock)."""
        return time.monotonic() < self._valid_until

    def release(self) -> bool:
        """Delete the lock if this holder still has it."""
        self._valid_until = 0.0
        return bool(self._release(keys=[self.key], args=[self.token]))

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)


def leader_lock(platform: Platform) -> LeaderLock:
    """The platform's scheduler lock, on a Redis client with timeouts under a third of the
    lock's lifetime."""
    settings = platform.settings
    timeout = max(0.1, min(2.0, settings.scheduler_lock_seconds / 3))
    client = redis.Redis.from_url(
        settings.redis_url or "",
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    key = f"{settings.redis_namespace}:scheduler:leader"
    return LeaderLock(client, key, settings.scheduler_lock_seconds)


class TickScheduler:
    """Emits every tick of ``platform`` on its cron schedule while it holds the leader lock.

    Parameters:
      platform: the assembled platform; its ticks are scheduled.
      scheduler: an APScheduler 3 scheduler (a ``BlockingScheduler`` in UTC by default).
      clock: the time slots are computed at (tests pin it).
      lock: the leader lock (the platform's by default).
      heartbeat_file: beaten while the scheduler runs (``speedtier alive scheduler``).
    """

    def __init__(
        self,
        platform: Platform,
        *,
        scheduler: BaseScheduler | None = None,
        clock: Clock = utcnow,
        lock: LeaderLock | None = None,
        heartbeat_file: Path | None = None,
    ) -> None:
        self.platform = platform
        self.grace_seconds = platform.settings.scheduler_misfire_grace_seconds
        self.scheduler = scheduler or BlockingScheduler(timezone=UTC)
        self.clock = clock
        self.lock = lock or leader_lock(platform)
        self._leader = False
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None
        self.heartbeat_file = heartbeat_file
        for tick in platform.ticks:
            self.scheduler.add_job(
                self.emit,
                cron_trigger(tick.cron),
                args=[tick.name],
                id=tick.name,
                name=f"tick {tick.name}",
                misfire_grace_time=self.grace_seconds,
                coalesce=True,
                max_instances=1,
                replace_existing=True,
            )

    @property
    def is_leader(self) -> bool:
        return self._leader and self.lock.valid

    # -- leadership ------------------------------------------------------------------------

    def refresh_leadership(self) -> bool:
        """Take or renew the lock; on becoming leader, catch up on the latest slots."""
        with self._guard:
            was_leader = self._leader
            try:
                self._leader = self.lock.hold()
            except redis.RedisError as exc:
                log.warning("scheduler: cannot reach Redis for the leader lock: %s", exc)
                self._leader = False
            elected = self._leader and not was_leader
        if elected:
            log.info("scheduler: elected leader (%s)", self.lock.token)
            self.catch_up()
        elif was_leader and not self._leader:
            log.warning("scheduler: lost leadership (%s)", self.lock.token)
        return self._leader

    def _keep_leadership(self) -> None:
        interval = min(self.lock.ttl_seconds / 3, heartbeat.BEAT_SECONDS)
        while not self._stopping.is_set():
            self.refresh_leadership()
            if self.heartbeat_file is not None and self.scheduler.running:
                heartbeat.beat(self.heartbeat_file)  # whether or not Redis answered
            self._stopping.wait(interval)

    def start_leadership(self) -> None:
        """Start renewing (or waiting for) the leader lock in a background thread."""
        if self._keeper is None:
            self._keeper = threading.Thread(
                target=self._keep_leadership, name="scheduler-leader", daemon=True
            )
            self._keeper.start()

    # -- emission --------------------------------------------------------------------------

    def emit(self, name: str) -> Enqueued | None:
        """The APScheduler job of tick ``name``: enqueue its current slot if this replica
        leads and the tick is not paused. Returns the enqueue's answer, or None."""
        if not (self.refresh_leadership() and self.lock.valid):
            log.debug("scheduler: %s not emitted, not the leader", name)
            return None
        return self.emit_tick(self.platform.tick(name))

    def emit_tick(self, tick: Tick) -> Enqueued | None:
        """Enqueue the tick's latest slot within the grace period, unless paused."""
        slot = tick_slot(tick, self.clock(), self.grace_seconds)
        if slot is None:
            log.warning("scheduler: %s has no fire time within the grace period", tick.name)
            return None
        if tick.pause_flag and self.platform.flags.is_enabled(tick.pause_flag):
            log.info(
                "scheduler: %s slot %s skipped, paused by %s", tick.name, slot, tick.pause_flag
            )
            self.record_emission(tick, slot, f"skipped: paused by {tick.pause_flag}")
            TICKS.labels(tick.name, "paused").inc()
            # Fired on time; no job will close the check-in, so close it here.
            check_in(tick, slot, "ok", self.platform.monitor_settings)
            return None
        if not self.slot_finished(tick, slot):
            # (a slot emitted again after its run ended, by a catch-up, must not reopen the
            # check-in its run closed: Sentry would then report a timeout)
            check_in(tick, slot, "in_progress", self.platform.monitor_settings)
        answer = enqueue_tick(self.platform, tick, slot)
        log.info("scheduler: %s slot %s %s (%s)", tick.name, slot, answer.outcome, answer.job_id)
        self.record_emission(tick, slot, answer.outcome)
        TICKS.labels(tick.name, answer.outcome).inc()
        return answer

    def slot_finished(self, tick: Tick, slot: str) -> bool:
        """Whether the slot's job already ran to an end (its record is kept finished)."""
        try:
            record = self.platform.brokers.record(tick.job_id(slot))
        except redis.RedisError:
            return False  # the enqueue that follows meets the same error
        return record is not None and record.get("state") in FINISHED_STATES

    def record_emission(self, tick: Tick, slot: str, outcome: str) -> None:
        """Note the tick's last emission (slot, what the enqueue answered, when) in
        ``<ns>:scheduler:emissions`` for the dashboard; the job record of the slot then says
        how its run ended. A note that cannot be written is only logged."""
        note = json.dumps({"slot": slot, "outcome": outcome, "at": self.clock().isoformat()})
        try:
            self.platform.broker.client.hset(emissions_key(self.platform), tick.name, note)
        except redis.RedisError as exc:
            log.warning("scheduler: could not note %s's emission: %s", tick.name, exc)

    def catch_up(self) -> None:
        """Emit each tick's latest slot within the grace period (after an election)."""
        for tick in self.platform.ticks:
            if tick_slot(tick, self.clock(), self.grace_seconds) is None:
                # The usual case for a daily tick: its last fire time is long past, nothing
                # to catch up on (not worth a warning at every start).
                log.debug("scheduler: %s has no slot to catch up on", tick.name)
                continue
            try:
                self.emit_tick(tick)
            except Exception:
                log.exception("scheduler: catching up on %s failed", tick.name)

    # -- lifecycle -------------------------------------------------------------------------

    def run(self, *, handle_signals: bool = True) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``), then release
        the lock. Blocks with the default ``BlockingScheduler``."""
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self._on_signal)
        self.start_leadership()
        try:
            if not self._stopping.is_set():
                log.info("scheduler: %d tick(s) scheduled", len(self.platform.ticks))
                self.scheduler.start()
        finally:
            self.close()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("scheduler: %s received, stopping", signal.Signals(signum).name)
        self.stop()

    def stop(self) -> None:
        """Stop firing (waiting for emissions under way) and stop renewing the lock."""
        self._stopping.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def close(self) -> None:
        """Stop the lock's renewal and release it if held."""
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join(timeout=self.lock.ttl_seconds)
            self._keeper = None
        with self._guard:
            try:
                if self.lock.release():
                    log.info("scheduler: released the leader lock")
            except redis.RedisError as exc:
                log.warning("scheduler: could not release the leader lock: %s", exc)
            self._leader = False
        self.lock.client.close()
