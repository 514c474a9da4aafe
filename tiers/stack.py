"""Assemble the tier broker with its middleware stack, in the order it must run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dramatiq.middleware import CurrentMessage, TimeLimit

from tiers.broker import TierBroker
from tiers.families import Family
from tiers.middleware.group_slots import GroupSlots
from tiers.middleware.job_metrics import JobMetrics
from tiers.middleware.log_context import LogContext
from tiers.middleware.outcomes import Outcomes
from tiers.middleware.pause import PauseSwitch
from tiers.middleware.windows import ProviderWindows
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows


def build_broker(
    *,
    redis_url: str,
    namespace: str,
    families: Mapping[str, Family],
    is_enabled: Callable[[str], bool],
    windows: Mapping[str, WindowRule] | None = None,
    lease_seconds: float = 30.0,
    heartbeat_timeout_ms: int = 60_000,
    **broker_options: Any,
) -> tuple[TierBroker, GroupSlots]:
    """A broker whose ``before_process_message`` runs: claim the slot (drop stale copies),
    check the kill switch, take a window start; and whose ``after_process_message`` settles
    the outcome. ``families`` is a live mapping: families added later are seen."""
    broker = TierBroker(
        url=redis_url,
        namespace=namespace,
        lease_seconds=lease_seconds,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
        **broker_options,
    )
    slots = GroupSlots(broker.jobs)
    for middleware in (
        CurrentMessage(),
        LogContext(),
        TimeLimit(),
        slots,
        JobMetrics(),
        PauseSwitch(families, is_enabled),
        ProviderWindows(families, RateWindows(broker.client, namespace), windows),
        Outcomes(families, broker.jobs, slots),
    ):
        broker.add_middleware(middleware)
    return broker, slots
