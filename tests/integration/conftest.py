"""The integration tests' platform-level broker and router: the harness's test families
(``tests/platform_harness.py``) on a TierBroker of this test's Redis namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from router.enqueue import Router
from router.registry import Registry
from tests import platform_harness as h
from tiers.broker import TierBroker


@pytest.fixture
def broker(redis_url: str, namespace: str) -> Iterator[TierBroker]:
    broker = h.make_broker(redis_url, namespace)
    yield broker
    broker.close()


@pytest.fixture
def router(broker: TierBroker) -> Router:
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    return Router(registry, broker)
