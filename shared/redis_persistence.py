"""Whether the Redis that holds queued work survives a restart: "202 means durable" rests on it.

Every process checks at start-up (:func:`verify_redis_persistence`, called by the bootstrap,
``speedtier worker``, ``speedtier api`` and ``speedtier up``):

=================================================  ==========================  =================
Redis reports                                      production, staging         development, test
=================================================  ==========================  =================
``appendonly yes``, ``appendfsync always`` or       starts                      starts
``everysec``
``appendonly yes``, ``appendfsync no``              starts, WARNING (the OS     the same
                                                    flushes: up to ~30 s lost
                                                    on power loss)
``appendonly no`` (RDB snapshots or nothing)        refuses to start            WARNING, once
                                                    (:class:`VolatileRedis`),
                                                    unless
                                                    ``SPEEDTIER_ALLOW_VOLATILE_
                                                    REDIS`` (then a WARNING)
``maxmemory-policy`` other than ``noeviction``      refuses to start            WARNING, once
(``allkeys-lru``, ``volatile-ttl``...)               (:class:`EvictingRedis`;
                                                    no override: an evicting
                                                    Redis drops accepted jobs
                                                    and the job records that
                                                    deduplicate them)
``CONFIG`` unavailable (managed Redis)              WARNING: cannot be          the same
                                                    verified, starts
Redis unreachable                                   WARNING: not verified,      the same
                                                    starts (and retries as
                                                    without the check)
this host's clock off Redis's by more than          refuses to start            WARNING, once
``SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS``              (:class:`~shared.clock_
                                                    offset.ClockOffsetTooLarge`)
``TIME`` refused (an ACL without it)                refuses to start            WARNING, once
                                                    (:class:`~shared.clock_
                                                    offset.TimeRefused`)
=================================================  ==========================  =================

The eviction policy can change while the processes run (``CONFIG SET``, a managed service's
parameter group): ``speedtier ready`` and the API's ``/readyz`` fail on an evicting Redis in
production and staging (``services.app.readiness``), and every worker process checks again
every ``POLICY_CHECK_SECONDS`` (a minute; :class:`EvictionWatch`), logging an ERROR
(a WARNING in development and test) when a Redis starts evicting and when it stops.

"Once" spans a process tree: the first process to warn notes it in the environment its
children inherit (``speedtier up``'s processes, a worker pool's children), so a development
run prints the warning once, not once per process. Production and staging ignore the note:
each process verifies again and refuses on its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from shared.clock_offset import ClockReading, TimeRefused, judge_offset, read_offset
from shared.config import Settings
from shared.config_values import url_location
from shared.errors import SpeedtierError

log = logging.getLogger(__name__)

#: Set in the environment (to hashes of the Redis URLs, comma-separated) once a development
#: warning about each was logged.
WARNED_ENV = "SPEEDTIER_REDIS_PERSISTENCE_WARNED"
DURABLE_FSYNC = ("always", "everysec")
CHECK_TIMEOUT_SECONDS = 5.0
#: How often a worker process checks again that every Redis it uses does not evict keys.
POLICY_CHECK_SECONDS = 60.0


class VolatileRedis(SpeedtierError, RuntimeError):
    """Production or staging Redis without AOF persistence: accepted work could be lost."""


class EvictingRedis(VolatileRedis):
    """Production or staging Redis whose ``maxmemory-policy`` may evict keys: accepted jobs
    and their records could be dropped when it fills up."""


#: The only eviction policy under which Redis refuses writes instead of dropping keys.
NO_EVICTION = "noeviction"


@dataclass(frozen=True)
class Persistence:
    """What Redis says about its persistence.

    Attributes:
      appendonly: whether AOF is on; None when it could not be read.
      appendfsync: ``always``, ``everysec`` or ``no``; None when it could not be read.
      save: the RDB snapshot schedule (``""``: none); None when it could not be read.
      unverifiable: why CONFIG could not be read (managed Redis, ACL), else None.
    """

    appendonly: bool | None
    appendfsync: str | None
    save: str | None
    unverifiable: str | None = None


def inspect_persistence(client: redis.Redis) -> Persistence:
    """Read ``CONFIG GET appendonly|appendfsync|save``, or ``INFO persistence`` where
    CONFIG is disabled (managed Redis: then ``unverifiable`` says why).

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
    """
    config: dict[str, str] = {}
    try:
        for name in ("appendonly", "appendfsync", "save"):
            config |= {_text(k): _text(v) for k, v in client.config_get(name).items()}
    except redis.ResponseError as exc:  # renamed or disabled CONFIG, or an ACL without it
        reason = str(exc).strip() or type(exc).__name__
        try:
            info = client.info("persistence")
        except redis.ResponseError:
            return Persistence(None, None, None, unverifiable=reason)
        enabled = info.get("aof_enabled")
        appendonly = None if enabled is None else bool(int(enabled))
        return Persistence(appendonly, None, None, unverifiable=reason)
    if "appendonly" not in config:
        return Persistence(None, None, None, unverifiable="CONFIG GET answered nothing")
    return Persistence(
        appendonly=config["appendonly"] == "yes",
        appendfsync=config.get("appendfsync"),
        save=config.get("save"),
    )


def verify_redis_persistence(
    settings: Settings, clock: Callable[[], float] = time.time
) -> Persistence | None:
    """Check the persistence of every Redis the settings name (``REDIS_URL`` and each tier's
    own, ``Settings.redis_urls``) as the table above says, and this host's ``clock`` against
    each one's (:mod:`shared.clock_offset`).

    Returns:
      What the first of them (``REDIS_URL``) reported, or None when it could not be reached
      (or no URL is set).

    Raises:
      VolatileRedis: in production or staging when AOF is off on one of them and
        ``SPEEDTIER_ALLOW_VOLATILE_REDIS`` is not set.
      ClockOffsetTooLarge: in production or staging when this host's clock is further from
        one's than ``SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS``.
      TimeRefused: in production or staging when one refuses ``TIME``.
    """
    reports = [_verify(settings, url, clock) for url in settings.redis_urls()]
    return reports[0] if reports else None


def _verify(settings: Settings, url: str, clock: Callable[[], float]) -> Persistence | None:
    client = redis.Redis.from_url(
        url,
        socket_connect_timeout=CHECK_TIMEOUT_SECONDS,
        socket_timeout=CHECK_TIMEOUT_SECONDS,
    )
    try:
        found = inspect_persistence(client)
        policy = eviction_policy(client)
        reading = read_clock(url, settings, client, clock)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        _warn(url, settings, f"could not check Redis persistence (Redis did not answer: {exc})")
        return None
    finally:
        client.close()
    _judge(url, settings, found)
    _judge_eviction(url, settings, policy)
    if reading is not None:
        judge_offset(
            url_location(url), reading, settings, lambda text: _warn(f"{url}#clock", settings, text)
        )
    return found


def read_clock(
    url: str, settings: Settings, client: redis.Redis, clock: Callable[[], float]
) -> ClockReading | None:
    """This host's clock against ``client``'s Redis; None when Redis refuses ``TIME`` (an ACL
    without it), which development and test are warned about.

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
      TimeRefused: production or staging, ``TIME`` refused: the scripts that judge leases and
        heartbeats call it too, and would fail.
    """
    try:
        return read_offset(client, clock)
    except redis.ResponseError as exc:
        problem = (
            f"Redis {url_location(url)} refuses TIME ({exc}): the scripts that hand on the "
            "slots of dead workers' jobs and return their messages read Redis's clock with it, "
            "and this host's clock cannot be compared with Redis's. Allow TIME to the user "
            "(ACL SETUSER <user> +time)"
        )
        if settings.is_production_like:
            raise TimeRefused(
                f"refusing to start in SPEEDTIER_ENV={settings.environment}: {problem}"
            ) from None
        _warn(f"{url}#clock", settings, problem)
        return None


def eviction_policy(client: redis.Redis) -> str | None:
    """Redis's ``maxmemory-policy`` (``CONFIG GET``, or ``INFO memory`` where CONFIG is
    disabled); None when neither tells.

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
    """
    try:
        config = client.config_get("maxmemory-policy")
        values = [_text(v) for k, v in config.items() if _text(k) == "maxmemory-policy"]
        if values:
            return values[0]
    except redis.ResponseError:
        pass
    try:
        policy = client.info("memory").get("maxmemory_policy")
    except redis.ResponseError:
        return None
    return None if policy is None else _text(policy)


def eviction_refusal(url: str, policy: str | None) -> str | None:
    """Why a Redis with eviction ``policy`` must not hold queued work, or None when it may
    (``noeviction``, or a policy that could not be read)."""
    if policy is None or policy == NO_EVICTION:
        return None
    return (
        f"Redis {url_location(url)} has maxmemory-policy={policy}: when it reaches maxmemory it "
        "evicts keys, so accepted jobs and the records that deduplicate them disappear. Set "
        f"'maxmemory-policy {NO_EVICTION}' (a full Redis then refuses enqueues with 503 "
        "queue_full instead of losing them)"
    )


def _judge_eviction(url: str, settings: Settings, policy: str | None) -> None:
    refusal = eviction_refusal(url, policy)
    if refusal is None:
        return
    if settings.environment in ("production", "staging"):
        raise EvictingRedis(f"refusing to start in SPEEDTIER_ENV={settings.environment}: {refusal}")
    _warn(url + "#eviction", settings, refusal)


class EvictionWatch:
    """Checks every Redis of ``settings`` for an evicting ``maxmemory-policy`` at most every
    ``every`` seconds, when :meth:`tick` is called (a worker's heartbeat); logs when one
    starts evicting (ERROR in production and staging, WARNING elsewhere) and when it stops.

    Parameters:
      settings: the process's settings.
      every: seconds between two checks.
      clock: seconds, monotonic.
    """

    def __init__(
        self,
        settings: Settings,
        every: float = POLICY_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.every = every
        self.last = clock()
        #: The URLs found evicting at the last check.
        self.evicting: set[str] = set()

    def tick(self) -> None:
        """Check now when the interval has passed since the last check."""
        if self.clock() - self.last < self.every:
            return
        self.last = self.clock()
        self.check()

    def check(self) -> None:
        """Check every Redis now (one that does not answer is left as it was)."""
        strict = self.settings.environment in ("production", "staging")
        for url in self.settings.redis_urls():
            client = redis.Redis.from_url(
                url,
                socket_connect_timeout=CHECK_TIMEOUT_SECONDS,
                socket_timeout=CHECK_TIMEOUT_SECONDS,
            )
            try:
                refusal = eviction_refusal(url, eviction_policy(client))
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            finally:
                client.close()
            if refusal is not None and url not in self.evicting:
                self.evicting.add(url)
                log.log(logging.ERROR if strict else logging.WARNING, refusal)
            elif refusal is None and url in self.evicting:
                self.evicting.discard(url)
                log.warning("Redis %s no longer evicts keys", url_location(url))


def _judge(url: str, settings: Settings, found: Persistence) -> None:
    where = url_location(url)
    if found.unverifiable is not None:
        seen = {True: "; INFO reports AOF on", False: "; INFO reports AOF off", None: ""}
        _warn(
            url,
            settings,
            f"cannot verify the persistence of Redis {where} (CONFIG GET failed: "
            f"{found.unverifiable}{seen[found.appendonly]}). Accepted jobs are only as "
            "durable as the provider makes them: make sure it persists writes (AOF, or a "
            "replicated transaction log) before relying on '202 means durable'",
        )
        return
    if not found.appendonly:
        message = (
            f"Redis {where} has appendonly=no (RDB snapshots: {found.save or 'none'}): a Redis "
            "restart loses every job accepted since the last snapshot, so '202 means durable' "
            "does not hold. Turn AOF on: 'appendonly yes' with 'appendfsync everysec' (or "
            "'always')"
        )
        if settings.environment in ("production", "staging"):
            if not settings.allow_volatile_redis:
                raise VolatileRedis(
                    f"refusing to start in SPEEDTIER_ENV={settings.environment}: {message}; "
                    "or set SPEEDTIER_ALLOW_VOLATILE_REDIS=1 to accept losing jobs"
                )
            log.warning("%s (allowed by SPEEDTIER_ALLOW_VOLATILE_REDIS)", message)
            return
        _warn(url, settings, message)
        return
    if found.appendfsync not in DURABLE_FSYNC:
        _warn(
            url,
            settings,
            f"Redis {where} has appendonly=yes but appendfsync={found.appendfsync}: the OS "
            "decides when writes reach the disk, so a power loss can lose about the last 30 s "
            "of accepted jobs; 'appendfsync everysec' bounds that to about a second",
        )


def _warn(url: str, settings: Settings, message: str) -> None:
    """Log ``message`` once per process tree (and Redis) in development/test, every time
    elsewhere."""
    if settings.environment in ("production", "staging"):
        log.warning(message)
        return
    mark = hashlib.sha256(url.encode()).hexdigest()[:16]
    warned = os.environ.get(WARNED_ENV, "").split(",")
    if mark in warned:
        return
    os.environ[WARNED_ENV] = ",".join([*filter(None, warned), mark])
    log.warning(message)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
