"""Readiness: can this process reach Redis and PostgreSQL right now? (And, in production and
staging, does every Redis refuse to evict keys: ``maxmemory-policy noeviction``.)

One check serves the API's ``/readyz`` and the ``speedtier ready`` probe of workers and the
scheduler. Each check opens its own short-lived connection with a short timeout, so a hung
server fails the probe instead of hanging it, and the answer does not depend on a pool that
still holds connections from before an outage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from shared.config import TIER_NAMES, Settings
from shared.redis_persistence import eviction_policy, eviction_refusal

if TYPE_CHECKING:
    from router.context import ServiceContext

#: Seconds each dependency gets to answer (libpq rounds connect timeouts below 2 up to 2).
CHECK_TIMEOUT_SECONDS = 2.0

Readiness = dict[str, str | None]


def check_readiness(
    source: ServiceContext | Settings, *, timeout: float = CHECK_TIMEOUT_SECONDS
) -> Readiness:
    """Ping Redis and run ``SELECT 1`` on PostgreSQL.

    Parameters:
      source: a service context or bare settings (``speedtier ready`` needs no platform).
      timeout: seconds each check may take.

    Returns:
      ``{"redis": None | error, "postgresql": None | error}``; None means reachable.
    """
    settings = source if isinstance(source, Settings) else source.settings
    return {
        "redis": _check_every_redis(settings, timeout),
        "postgresql": _check_postgresql(settings.database_url, timeout),
    }


def is_ready(readiness: Readiness) -> bool:
    return all(error is None for error in readiness.values())


def _check_every_redis(settings: Settings, timeout: float) -> str | None:
    """``REDIS_URL`` and each tier's own Redis: the first error (naming the tier's
    variable when it is a tier's Redis), or None when all answer."""
    # Production and staging refuse a Redis that may evict queued work, at start and here.
    strict = settings.environment in ("production", "staging")
    error = _check_redis(settings.redis_url, timeout, strict)
    if error is not None:
        return error
    checked = {settings.redis_url}
    for tier in TIER_NAMES:
        url = settings.tier_redis_url(tier)
        if url in checked:
            continue
        checked.add(url)
        error = _check_redis(url, timeout, strict)
        if error is not None:
            return f"SPEEDTIER_{tier.upper()}_REDIS_URL: {error}"
    return None


def _check_redis(url: str | None, timeout: float, refuse_eviction: bool = False) -> str | None:
    if not url:
        return "REDIS_URL is not set"
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as exc:  # not a URL redis-py can read
        return f"{type(exc).__name__}: {exc}"
    try:
        client.ping()
        refusal = eviction_refusal(url, eviction_policy(client)) if refuse_eviction else None
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return refusal


def postgresql_error(url: str | None, timeout: float = CHECK_TIMEOUT_SECONDS) -> str | None:
    """What stops ``SELECT 1`` on ``url`` within ``timeout`` seconds, or None when it answers
    (also the API's ``speedtier_postgresql_up`` gauge)."""
    return _check_postgresql(url, timeout)


def _check_postgresql(url: str | None, timeout: float) -> str | None:
    if not url:
        return "DATABASE_URL is not set"
    try:
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(
            conninfo,
            connect_timeout=max(2, round(timeout)),
            options=f"-c statement_timeout={int(timeout * 1000)}",
            application_name="speedtier-readiness",
        ) as connection:
            connection.execute("SELECT 1")
    except (psycopg.Error, ArgumentError, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc).strip()}"
    return None
