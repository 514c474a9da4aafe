"""A Redis that may evict keys is refused in production and staging (at start, by the
readiness probe, and reported by the periodic check), and warned about in development.
Real redis-server processes of the test's own."""

from __future__ import annotations

import logging

import pytest
import redis
from click.testing import CliRunner

from services.app.cli import main
from services.app.readiness import check_readiness
from shared.config import Settings, load_settings
from shared.redis_persistence import (
    WARNED_ENV,
    EvictingRedis,
    EvictionWatch,
    verify_redis_persistence,
)
from tests.fixtures_redis import MakeRedisServer

#: A Fernet key: production settings require one where connectors store credentials (a
#: settings object without that field ignores it).
CREDENTIALS_KEY = "Q2W6a9lVtrG7s3wKpZ0tqg1yUe8Hn5mXc4bJd2fRkLo="


def settings_of(**values: object) -> Settings:
    """Settings as production reads them."""
    return load_settings(connector_credentials_key=CREDENTIALS_KEY, **values)


@pytest.fixture(autouse=True)
def not_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WARNED_ENV, raising=False)


def durable_redis(make_redis_server: MakeRedisServer, policy: str) -> str:
    """A Redis with eviction ``policy`` (its missing AOF is allowed by the settings below,
    so only the eviction policy is judged)."""
    url = make_redis_server()
    client = redis.Redis.from_url(url)
    client.config_set("maxmemory-policy", policy)
    client.close()
    return url


@pytest.mark.parametrize("environment", ["production", "staging"])
def test_production_and_staging_refuse_to_start_on_an_evicting_redis(
    make_redis_server: MakeRedisServer, environment: str
) -> None:
    url = durable_redis(make_redis_server, "allkeys-lru")
    with pytest.raises(EvictingRedis, match="maxmemory-policy=allkeys-lru"):
        verify_redis_persistence(
            settings_of(redis_url=url, environment=environment, allow_volatile_redis=True)
        )
    # and a noeviction Redis starts
    url = durable_redis(make_redis_server, "noeviction")
    verify_redis_persistence(
        settings_of(redis_url=url, environment=environment, allow_volatile_redis=True)
    )


def test_development_warns_about_an_evicting_redis_and_starts(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = durable_redis(make_redis_server, "volatile-ttl")
    verify_redis_persistence(load_settings(redis_url=url, environment="development"))
    assert any("maxmemory-policy=volatile-ttl" in r.getMessage() for r in caplog.records)


def test_speedtier_ready_fails_in_production_on_an_evicting_redis(
    make_redis_server: MakeRedisServer, database_url: str
) -> None:
    url = durable_redis(make_redis_server, "allkeys-lru")
    production = settings_of(redis_url=url, database_url=database_url, environment="production")
    assert "maxmemory-policy=allkeys-lru" in (check_readiness(production)["redis"] or "")
    development = load_settings(redis_url=url, database_url=database_url)
    assert check_readiness(development)["redis"] is None
    env = {
        "REDIS_URL": url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_ENV": "production",
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
    }
    result = CliRunner().invoke(main, ["ready"], env=env)
    assert result.exit_code == 1
    assert "redis: not ready" in result.output and "allkeys-lru" in result.output


def test_the_periodic_check_reports_a_redis_that_starts_evicting_once(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = durable_redis(make_redis_server, "noeviction")
    now = [0.0]
    watch = EvictionWatch(
        settings_of(redis_url=url, environment="production"), every=60, clock=lambda: now[0]
    )
    client = redis.Redis.from_url(url)
    # Given a Redis switched to an evicting policy while the worker runs
    client.config_set("maxmemory-policy", "allkeys-lfu")
    watch.tick()  # not due yet
    assert not caplog.records
    # When the check is due, twice
    for _ in range(2):
        now[0] += 61
        watch.tick()
    # Then one ERROR says so; and one line when it stops evicting
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "maxmemory-policy=allkeys-lfu" in errors[0].getMessage()
    client.config_set("maxmemory-policy", "noeviction")
    now[0] += 61
    watch.tick()
    assert "no longer evicts" in caplog.records[-1].getMessage()
    client.close()
