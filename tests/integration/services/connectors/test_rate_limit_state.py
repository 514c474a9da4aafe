"""RateLimitState: provider quotas per connection in the real Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis

from services.connectors.nodes import Connection, RateLimitState, header


def conn(connection_id: int = 1, source: str = "github") -> Connection:
    return Connection(source, connection_id, 3, "", {}, {})


def test_a_spent_quota_blocks_the_connection_until_its_reset(
    redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    reset = datetime.now(UTC) + timedelta(minutes=10)
    state.record(conn(), 12, reset)
    assert state.blocked_until(conn()) is None  # quota left
    state.record(conn(), 0, reset)
    blocked = state.blocked_until(conn())
    assert blocked is not None and abs((blocked - reset).total_seconds()) < 0.01
    assert state.blocked_until(conn(2)) is None  # another connection
    assert state.blocked_until(conn(1, "linear")) is None  # another source's connection 1
    assert state.blocked_until(conn(), now=reset + timedelta(seconds=1)) is None
    ttl = redis_client.pttl(state.key(conn()))
    assert 0 < ttl <= 600_000  # the key expires at the reset


def test_blocks_only_grow(redis_client: redis.Redis, namespace: str) -> None:
    state = RateLimitState(redis_client, namespace)
    later = datetime.now(UTC) + timedelta(minutes=30)
    sooner = datetime.now(UTC) + timedelta(minutes=5)
    state.record(conn(), 0, later)  # e.g. Linear's complexity budget
    state.record(conn(), 0, sooner)  # its request budget resets first
    blocked = state.blocked_until(conn())
    assert blocked is not None and abs((blocked - later).total_seconds()) < 0.01


def test_reserve_retry_after_and_stale_readings(redis_client: redis.Redis, namespace: str) -> None:
    state = RateLimitState(redis_client, namespace, reserve=5)
    reset = datetime.now(UTC) + timedelta(minutes=1)
    state.record(conn(), 6, reset)
    assert state.blocked_until(conn()) is None
    state.record(conn(), 5, reset)  # at the reserve: stop before running dry
    assert state.blocked_until(conn()) is not None

    fresh = RateLimitState(redis_client, namespace + ":other")
    fresh.record(conn(), None, reset)  # a Retry-After: blocked whatever the remaining
    assert fresh.blocked_until(conn()) is not None
    fresh.record(conn(7), 0, datetime.now(UTC) - timedelta(seconds=1))  # already past
    fresh.record(conn(8), 0, None)  # no reset known
    assert fresh.blocked_until(conn(7)) is None and fresh.blocked_until(conn(8)) is None


def test_the_reserve_is_kept_for_webhook_work_per_source_and_connection(
    redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace, reserves={"github": 10})
    reset = datetime.now(UTC) + timedelta(minutes=1)
    # 10 left of GitHub's quota: bulk work waits for the reset, webhook work goes on
    state.record(conn(), 10, reset)
    assert state.blocked_until(conn()) is not None
    assert state.blocked_until(conn(), reserved=True) is None
    # the same reading on a source without a reserve blocks nothing
    state.record(conn(1, "linear"), 10, reset)
    assert state.blocked_until(conn(1, "linear")) is None
    # a connection's own settings.webhook_reserve wins over its source's
    own = Connection("github", 2, 3, "", {}, {"webhook_reserve": 3})
    state.record(own, 10, reset)
    assert state.blocked_until(own) is None
    state.record(own, 3, reset)
    assert state.blocked_until(own) is not None
    assert state.blocked_until(own, reserved=True) is None
    # spent, or a Retry-After: webhook work waits too
    state.record(conn(), 0, reset)
    assert state.blocked_until(conn(), reserved=True) is not None
    state.record(own, None, reset)
    assert state.blocked_until(own, reserved=True) is not None


def test_header_lookup_ignores_case() -> None:
    headers = {"X-GitHub-Delivery": "abc"}
    assert header(headers, "x-github-delivery") == "abc"
    assert header({"x-github-delivery": "abc"}, "X-GitHub-Delivery") == "abc"
    assert header(headers, "X-Other") is None
