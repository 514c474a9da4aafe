"""An enqueue under a guard window (``tiers.rate_window.WindowGuard``), on the real Redis: the
enqueue script reads the window before it does anything, so a full window refuses the whole
call (``WindowFull``) and writes nothing, an open one lets it through, and the window is read,
never counted. A call whose tier is on another Redis reads the window alone first."""

from __future__ import annotations

import pytest
import redis

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from shared.errors import WindowFull
from tests import platform_harness as h
from tests.fixtures_redis import MakeRedisServer
from tiers.broker import TierBroker
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows, WindowGuard
from tiers.tier_brokers import TierBrokers

RULE = WindowRule(3, 60)


def request(item: str) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item})


def guard_of(windows: RateWindows, reads: list[str] | None = None) -> WindowGuard:
    key = windows.key("guarded", "203.0.113.7")

    def read() -> float | None:
        if reads is not None:
            reads.append(key)
        used, ends = windows.used(key, RULE)
        return ends if used >= RULE.limit else None

    return WindowGuard(key, RULE, read)


def fill(windows: RateWindows, guard: WindowGuard, times: int) -> None:
    for _ in range(times):
        windows.acquire(guard.key, RULE)


def stored(client: redis.Redis, namespace: str) -> list[bytes]:
    """Every key of the namespace but the guard's windows."""
    return sorted(k for k in client.scan_iter(f"{namespace}:*") if b":window:" not in k)


@pytest.mark.parametrize("items", [["one"], ["one", "two"]], ids=["single", "batch"])
def test_a_full_window_refuses_the_whole_call_and_writes_nothing(
    router: Router, broker: TierBroker, namespace: str, items: list[str]
) -> None:
    windows = RateWindows(broker.client, namespace)
    guard = guard_of(windows)
    fill(windows, guard, RULE.limit)

    with pytest.raises(WindowFull) as refused:
        router.enqueue_many([request(item) for item in items], guard)

    used, ends = windows.used(guard.key, RULE)
    assert refused.value.ends_at == ends
    assert used == RULE.limit  # read, not counted
    assert stored(broker.client, namespace) == []


def test_an_open_window_lets_the_call_through_uncounted(
    router: Router, broker: TierBroker, namespace: str
) -> None:
    windows = RateWindows(broker.client, namespace)
    guard = guard_of(windows)
    fill(windows, guard, RULE.limit - 1)

    answers = router.enqueue_many([request("a"), request("b")], guard)
    again = router.enqueue_many([request("a")], guard)

    assert [a.outcome for a in answers] == ["added", "added"]
    assert again[0].outcome == "deduplicated"
    assert windows.used(guard.key, RULE)[0] == RULE.limit - 1
    assert broker.client.llen(f"{namespace}:t_plain.fast") == 2


def test_a_tier_on_another_redis_reads_the_window_alone_first(
    broker: TierBroker, namespace: str, make_redis_server: MakeRedisServer
) -> None:
    # Given the fast tier on a Redis of its own; the window stays on the control Redis
    fast = h.make_broker(make_redis_server(), namespace)
    registry = Registry()
    registry.add(h.families()["t_plain"])
    router = Router(registry, TierBrokers(broker, {"fast": fast}))
    windows = RateWindows(broker.client, namespace)
    reads: list[str] = []
    guard = guard_of(windows, reads)
    try:
        # When the window is open, the call goes through after one read of it
        assert router.enqueue_many([request("open")], guard)[0].outcome == "added"
        assert reads == [guard.key]
        # And when it is full, nothing reaches the tier's Redis
        fill(windows, guard, RULE.limit)
        with pytest.raises(WindowFull):
            router.enqueue_many([request("full"), request("full-2")], guard)
        assert fast.client.llen(f"{namespace}:t_plain.fast") == 1
        assert not fast.client.exists(f"{namespace}:job:plain-full")
    finally:
        fast.close()
