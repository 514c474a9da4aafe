"""The super sources over the tracker registry (``tracker.py``), on this test's Redis
namespace and database, with workers in threads of this process."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from services.app.bootstrap import Platform
from services.super_sources import store
from shared.credentials import CredentialBox
from shared.db.engine import session_scope
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources import tracker
from tests.platform_harness import serving

TRACKER = "tests.integration.services.super_sources.tracker"


@pytest.fixture
def super_platform(
    make_platform: MakePlatform, redis_client: redis.Redis, namespace: str
) -> Platform:
    tracker.configure(redis_client, namespace)
    return make_platform(services=[TRACKER])


@pytest.fixture
def organization() -> Callable[[], int]:
    """A fresh organization id per call (the database is shared by the session's tests)."""
    return lambda: random.randint(10**9, 2 * 10**9)


def credential_box(platform: Platform) -> CredentialBox:
    """The platform's own key ring (``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``)."""
    key = platform.settings.connector_credentials_key
    return CredentialBox.from_setting(key.get_secret_value() if key else None)


def make_connection(platform: Platform, organization_id: int, source: str, **fields: Any) -> int:
    with session_scope(platform.sessions) as session:
        box = credential_box(platform)
        row = store.create_connection(session, organization_id, source, box=box, **fields)
        session.commit()
        return row.id


@contextmanager
def workers(platform: Platform, *, threads: int = 8) -> Iterator[None]:
    """A real Dramatiq worker over the fast and slow queues, in a thread of this process."""
    queues = platform.registry.queues_of_tier("fast") + platform.registry.queues_of_tier("slow")
    with serving(platform.broker, queues, threads=threads):
        yield
