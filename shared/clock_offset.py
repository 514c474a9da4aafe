"""How far this host's wall clock is from the Redis's, checked at start and every minute.

Workers judge each other by wall-clock times they write into Redis: a group slot's lease
deadline (``now + SPEEDTIER_GROUP_LEASE_SECONDS`` on its holder's clock, refreshed every
quarter lease) and a worker's heartbeat. The judges read Redis's clock (``reap.lua``,
``look.lua``), so what a host's clock decides is how its own writes are read:

- a host behind Redis by more than a lease less its refresh (22.5 s by default) has the slots
  of its running jobs handed on, and their groups run over their caps;
- a host behind by more than the heartbeat timeout (60 s) is taken for dead and its jobs run
  again elsewhere (the fencing refuses the older run's settle, but the job ran twice); past
  half the timeout, a run it starts after a pause may be one a peer took back
  (``tiers.beat_log``).

Redis is the clock every process can read, so each process measures its offset to it
(``TIME``, the sample of three with the shortest round trip, the offset taken at the round
trip's middle and reduced by half of it). The limit is
``SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS`` (2 s), or less when the leases or the heartbeat timeout
are so short that twice it would not fit in what they leave a host (:func:`offset_limit`).

What a process whose clock is off by more than the limit meets:

- at start (with the Redis persistence check, ``shared.redis_persistence``): in production
  and staging it refuses to start (:class:`ClockOffsetTooLarge`); in development and test it
  logs a WARNING, once;
- while it runs (a worker, every minute with its heartbeat: :class:`ClockWatch`): an ERROR
  (a WARNING in development and test) when the offset goes over the limit, and a WARNING when
  it is back within it.

Every worker process exports its offset as ``speedtier_clock_offset_seconds`` (positive:
this host is ahead of Redis), which the chart's ``SpeedtierClockOffset`` alert watches. A
Redis that does not answer is not judged (the persistence check already warns about it).
Rate windows count each start in the window of the starting worker's clock, so hosts off by
a fraction of a second shift the edges of a one-second window by that much: hosts synced by
NTP (milliseconds) keep per-second provider limits exact.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from shared.config import Settings
from shared.config_values import url_location
from shared.errors import SpeedtierError

if TYPE_CHECKING:
    from prometheus_client import Gauge

log = logging.getLogger(__name__)

#: ``TIME`` calls a reading takes; the one with the shortest round trip is kept.
SAMPLES = 3
#: How often a worker process measures its offset again (:class:`ClockWatch`).
CHECK_SECONDS = 60.0
#: Connect and read timeout of the watch's connections: a Redis that does not answer
#: ``TIME`` within it is not judged (and the heartbeat that runs the watch is not held).
TIMEOUT_SECONDS = 1.0
#: A lease is refreshed every quarter of it (``tiers.middleware.group_slots``): its holder's
#: clock may run behind Redis's by the remaining three quarters before the lease looks
#: expired.
LEASE_ROOM = 3 / 4
#: A heartbeat is judged stale after the timeout, and a run starts without asking Redis when
#: the heartbeats were at most half of it apart (``tiers.beat_log``): the other half is the
#: room for a host's clock.
HEARTBEAT_ROOM = 1 / 2


class UnsafeClock(SpeedtierError, RuntimeError):
    """Production or staging: this host's clock cannot be trusted against Redis's, by which
    the leases and heartbeats it writes are judged (the two cases below)."""


class ClockOffsetTooLarge(UnsafeClock):
    """Production or staging process whose clock is further from Redis's than the limit."""


class TimeRefused(UnsafeClock):
    """Production or staging Redis that refuses ``TIME`` (an ACL without it): the scripts
    that judge leases and heartbeats call it too."""


@dataclass(frozen=True)
class ClockReading:
    """One measure of this host's clock against a Redis's.

    Attributes:
      offset_seconds: this host's time minus Redis's at the same moment (positive: ahead).
      round_trip_seconds: the ``TIME`` call's round trip: the offset is known to within half
        of it.
    """

    offset_seconds: float
    round_trip_seconds: float

    @property
    def least_offset(self) -> float:
        """The smallest offset the reading allows, in absolute value."""
        return max(0.0, abs(self.offset_seconds) - self.round_trip_seconds / 2)


def read_offset(
    client: redis.Redis, clock: Callable[[], float] = time.time, samples: int = SAMPLES
) -> ClockReading:
    """Measure ``clock`` against ``client``'s Redis (``samples`` ``TIME`` calls)."""
    best: ClockReading | None = None
    for _ in range(max(1, samples)):
        sent = clock()
        seconds, microseconds = client.time()
        answered = clock()
        reading = ClockReading(
            offset_seconds=(sent + answered) / 2 - (seconds + microseconds / 1_000_000),
            round_trip_seconds=max(0.0, answered - sent),
        )
        if best is None or reading.round_trip_seconds < best.round_trip_seconds:
            best = reading
    assert best is not None
    return best


def offset_limit(settings: Settings) -> float:
    """The largest offset from Redis a process may have: the setting, or less when the
    leases or the heartbeat timeout leave a host's clock less than twice that."""
    return min(
        settings.max_clock_offset_seconds,
        settings.group_lease_seconds * LEASE_ROOM / 2,
        settings.heartbeat_timeout_seconds * HEARTBEAT_ROOM / 2,
    )


def offset_problem(where: str, reading: ClockReading, limit: float) -> str | None:
    """What is wrong with ``reading`` of the Redis ``where``, or None within ``limit``."""
    if reading.least_offset <= limit:
        return None
    direction = "ahead of" if reading.offset_seconds > 0 else "behind"
    return (
        f"this host's clock is {abs(reading.offset_seconds):.3f} s {direction} the clock of "
        f"Redis {where} (more than {limit:g} s, SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS): the "
        "group leases and heartbeats it writes are judged by Redis's clock, so a host behind "
        "loses its running jobs' slots and is taken for dead, and one ahead delays their "
        "hand-on when it dies. Sync this host's clock (NTP: chrony, systemd-timesyncd)"
    )


def judge_offset(
    where: str, reading: ClockReading, settings: Settings, warn: Callable[[str], None]
) -> None:
    """Judge a start's ``reading`` of the Redis ``where``: an offset over
    :func:`offset_limit` is refused in production and staging, passed to ``warn`` elsewhere.

    Raises:
      ClockOffsetTooLarge: production or staging, over the limit.
    """
    problem = offset_problem(where, reading, offset_limit(settings))
    if problem is None:
        return
    if settings.is_production_like:
        raise ClockOffsetTooLarge(
            f"refusing to start in SPEEDTIER_ENV={settings.environment}: {problem}"
        )
    warn(problem)


class ClockWatch:
    """Measures this host's clock against every Redis of ``settings`` at most every
    ``every`` seconds, when :meth:`tick` is called (a worker's heartbeat): sets the offset
    gauge, logs when the offset goes over the limit (ERROR in production and staging,
    WARNING elsewhere) and when it is back within it.

    Parameters:
      settings: the process's settings.
      every: seconds between two readings.
      clock: the wall clock measured (seconds since the epoch).
      monotonic: what spaces the readings (seconds).
    """

    def __init__(
        self,
        settings: Settings,
        every: float = CHECK_SECONDS,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.every = every
        self.clock = clock
        self.monotonic = monotonic
        self.last: float | None = None
        #: The URLs whose offset was over the limit at the last reading.
        self.over: set[str] = set()

    def tick(self) -> None:
        """Read now when no reading was taken yet or the interval has passed."""
        if self.last is not None and self.monotonic() - self.last < self.every:
            return
        self.last = self.monotonic()
        self.check()

    def check(self) -> float | None:
        """Read every Redis now (one that does not answer is left as it was); returns the
        offset set on the gauge: the largest in absolute value, None when none answered."""
        limit = offset_limit(self.settings)
        level = logging.ERROR if self.settings.is_production_like else logging.WARNING
        largest: float | None = None
        for url in self.settings.redis_urls():
            client = redis.Redis.from_url(
                url, socket_connect_timeout=TIMEOUT_SECONDS, socket_timeout=TIMEOUT_SECONDS
            )
            try:
                reading = read_offset(client, self.clock)
            except redis.RedisError:
                continue  # unreachable, or TIME refused (the start check said so)
            finally:
                client.close()
            if largest is None or abs(reading.offset_seconds) > abs(largest):
                largest = reading.offset_seconds
            problem = offset_problem(url_location(url), reading, limit)
            if problem is not None and url not in self.over:
                self.over.add(url)
                log.log(level, problem)
            elif problem is None and url in self.over:
                self.over.discard(url)
                log.warning(
                    "this host's clock is back within %g s of the clock of Redis %s (%.3f s)",
                    limit,
                    url_location(url),
                    reading.offset_seconds,
                )
        if largest is not None:
            offset_gauge().set(largest)
        return largest


def offset_gauge() -> Gauge:
    """``speedtier_clock_offset_seconds``: a worker process's clock minus Redis's."""
    from shared import metrics

    return metrics.gauge(
        "clock_offset_seconds",
        "This worker process's wall clock minus Redis's (the largest in absolute value over "
        "the Redis it uses), measured every minute: positive when the host is ahead.",
        mode="liveall",
    )
