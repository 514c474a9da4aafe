"""The six queues at a glance: each one's ready and delayed messages, and per organization
the slots its group holds (jobs running or next in line) and the jobs parked behind them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiers.broker import TierBroker
from tiers.table import queue_name
from tiers.tier_brokers import TierBrokers

FAMILIES = ("super_import", "super_index", "super_webhook")
TIERS = ("fast", "slow")


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    ready: int
    delayed: int
    #: group owner (an organization id, ``*`` for a family-wide group) -> (admitted, parked)
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)


def queue_status(brokers: TierBrokers | TierBroker) -> list[QueueStatus]:
    """The status of the six queues, in family then tier order, each from its tier's Redis."""
    if isinstance(brokers, TierBroker):
        brokers = TierBrokers(brokers)
    statuses = []
    for family in FAMILIES:
        for tier in TIERS:
            queue, broker = queue_name(family, tier), brokers.of_tier(tier)
            ready, delayed = broker.queue_depths([queue])[queue]
            statuses.append(QueueStatus(queue, ready, delayed, groups=_groups(broker, queue)))
    return statuses


def _groups(broker: TierBroker, queue: str) -> dict[str, tuple[int, int]]:
    prefix = f"{broker.namespace}:group:{queue}|"
    owners = set()
    for raw in broker.client.scan_iter(match=f"{prefix}*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        owners.add(key[len(prefix) :].split(":", 1)[0])
    found = {owner: broker.jobs.group_state(f"{queue}|{owner}") for owner in sorted(owners)}
    return {owner: state for owner, state in found.items() if state != (0, 0)}


def counters(broker: TierBroker) -> dict[str, int]:
    """``super.<source>.<outcome>`` counts since the namespace began (on the control
    broker's Redis)."""
    raw = broker.client.hgetall(f"{broker.namespace}:super:counters")
    return {_text(k): int(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
