"""Assemble the tier broker with its middleware stack, in the order it must run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import redis
from dramatiq.middleware import CurrentMessage, TimeLimit

from tiers.broker import TierBroker
from tiers.families import Family
from tiers.middleware.cancel import CancelGate, CancelWatch, RunningJobs
from tiers.middleware.deliveries import DEFAULT_MAX_UNSETTLED, Deliveries
from tiers.middleware.group_slots import GroupSlots
from tiers.middleware.job_metrics import JobMetrics
from tiers.middleware.log_context import LogContext
from tiers.middleware.outcomes import Outcomes
from tiers.middleware.pause import PauseSwitch
from tiers.middleware.windows import ProviderWindows
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows
from tiers.tier_brokers import TierBrokers


def build_broker(
    *,
    redis_url: str,
    namespace: str,
    families: Mapping[str, Family],
    is_enabled: Callable[[str], bool],
    windows: Mapping[str, WindowRule] | None = None,
    lease_seconds: float = 30.0,
    heartbeat_timeout_ms: int = 60_000,
    windows_client: redis.Redis | None = None,
    cancel_grace_seconds: float = 30.0,
    max_unsettled: int = DEFAULT_MAX_UNSETTLED,
    **broker_options: Any,
) -> tuple[TierBroker, GroupSlots]:
    """A broker whose ``before_process_message`` runs: claim the slot (drop stale copies),
    check the kill switch, take a window start; and whose ``after_process_message`` settles
    the outcome. ``families`` is a live mapping: families added later are seen. Provider
    windows are counted on ``windows_client`` (the control Redis; default: the broker's).
    A cancelled job stops at its next cancel point, or is stopped ``cancel_grace_seconds``
    after its cancel (``tiers.middleware.cancel``). A job whose runs end without a settle
    ``max_unsettled`` times fails as ``worker_died``."""
    broker = TierBroker(
        url=redis_url,
        namespace=namespace,
        lease_seconds=lease_seconds,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
        **broker_options,
    )
    slots = GroupSlots(broker.jobs)
    watch = CancelWatch(cancel_grace_seconds)
    for middleware in (
        CurrentMessage(),
        LogContext(),
        slots,
        Deliveries(families, broker.jobs, slots, max_unsettled),
        CancelGate(watch),
        JobMetrics(),
        PauseSwitch(families, is_enabled),
        ProviderWindows(families, RateWindows(windows_client or broker.client, namespace), windows),
        Outcomes(families, broker.jobs, slots),
        RunningJobs(watch),
        # Last: its limit covers the actor alone, never a claim or a settle in flight (an
        # interrupted settle would leave its job active).
        TimeLimit(),
    ):
        broker.add_middleware(middleware)
    return broker, slots


def build_tier_brokers(
    *,
    redis_url: str,
    tier_redis_urls: Mapping[str, str],
    **options: Any,
) -> tuple[TierBrokers, GroupSlots]:
    """One broker per distinct Redis (``build_broker``'s stack on each): the control
    broker on ``redis_url`` and one for each other URL of ``tier_redis_urls`` (tier ->
    its Redis). Every broker counts provider windows on the control Redis. Returns the
    brokers and the control broker's group slots."""
    control, slots = build_broker(redis_url=redis_url, **options)
    by_url = {redis_url: control}
    for url in tier_redis_urls.values():
        if url not in by_url:
            by_url[url], _ = build_broker(redis_url=url, windows_client=control.client, **options)
    by_tier = {tier: by_url[url] for tier, url in tier_redis_urls.items()}
    return TierBrokers(control, by_tier), slots
