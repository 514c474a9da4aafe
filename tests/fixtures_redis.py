"""Real Redis for tests: each test gets its own key namespace, removed afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

REDIS_URL = (
    os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
)


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # fail loudly: CI must have Redis
        pytest.fail(f"Redis is not reachable at {REDIS_URL}: {exc}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh Redis key namespace for one test; its keys are deleted afterwards."""
    ns = f"t{uuid.uuid4().hex[:12]}"
    yield ns
    keys = list(redis_client.scan_iter(match=f"{ns}:*", count=1000))
    for start in range(0, len(keys), 500):
        redis_client.delete(*keys[start : start + 500])
