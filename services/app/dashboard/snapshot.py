"""What the queues hold right now, read from Redis in a few pipelined round trips.

==========  ===========================================================================
column      where it is read
==========  ===========================================================================
waiting     ``<ns>:<queue>``: messages ready to be fetched (LLEN)
delayed     ``<ns>:<queue>.DQ.msgs``: retries, window and outage delays (HLEN)
parked      ``<ns>:group:<queue>|<org>:parked``: held back because the group is at its cap
active      ``<ns>:__acks__.<worker>.<queue>`` of every live worker: fetched and not yet
            acknowledged (running, or prefetched by a worker thread)
failed      ``<ns>:<queue>.XQ``: dead letters of jobs that failed for good
==========  ===========================================================================

Groups are found through ``<ns>:__leases__`` (every group with an admitted job), so the cost
grows with the number of busy groups, never with the number of jobs. Each tier's rows come
from its own Redis (``tiers.tier_brokers``); ``workers`` counts the workers of every one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dramatiq.common import dq_name

from services.app.bootstrap import Platform
from shared.config import TIER_NAMES
from tiers.broker import TierBroker
from tiers.dead_letters import DeadLetters
from tiers.fair_order import count_ready, ready_from
from tiers.job_store import as_text


@dataclass
class QueueRow:
    tier: str
    family: str
    queue: str
    waiting: int = 0
    delayed: int = 0
    parked: int = 0
    active: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.waiting + self.delayed + self.parked + self.active + self.failed


@dataclass
class Group:
    """One (family, organization) group: its admitted jobs split by state, and its parked."""

    key: str
    queue: str
    family: str
    tier: str
    owner: str
    cap: int | None
    running: int = 0
    waiting_ids: list[str] = field(default_factory=list)  # redis ids of its waiting messages
    parked: int = 0

    @property
    def waiting(self) -> int:
        return len(self.waiting_ids)


@dataclass
class Snapshot:
    queues: list[QueueRow]
    groups: list[Group]
    workers: int

    def tier_totals(self) -> dict[str, QueueRow]:
        totals = {tier: QueueRow(tier, "", "") for tier in TIER_NAMES}
        for row in self.queues:
            total = totals[row.tier]
            for name in ("waiting", "delayed", "parked", "active", "failed"):
                setattr(total, name, getattr(total, name) + getattr(row, name))
        return totals


def _family_of_queue(queue: str) -> tuple[str, str]:
    family, _, tier = queue.rpartition(".")
    return family, tier


def _members(reply: Any) -> list[str]:
    return [as_text(member) for member in reply]


def take_snapshot(platform: Platform) -> Snapshot:
    """Every queue's counts and every busy group's state, each from its tier's Redis."""
    rows: list[QueueRow] = []
    groups: list[Group] = []
    workers = 0
    for broker, tiers in platform.brokers.serving():
        part = _snapshot_of(platform, broker, tiers)
        rows += part.queues
        groups += part.groups
        workers += part.workers
    rows.sort(key=lambda row: (TIER_NAMES.index(row.tier), row.queue))
    return Snapshot(rows, groups, workers)


def _snapshot_of(platform: Platform, broker: TierBroker, tiers: tuple[str, ...]) -> Snapshot:
    """The queues of ``tiers`` and the busy groups on ``broker``'s Redis."""
    client = broker.client
    ns = platform.settings.redis_namespace
    queues = [q for tier in tiers for q in sorted(platform.registry.queues_of_tier(tier))]
    workers = _members(client.zrange(f"{ns}:__heartbeats__", 0, -1))
    group_keys = [
        key
        for key in _members(client.zrange(f"{ns}:__leases__", 0, -1))
        if _family_of_queue(key.partition("|")[0])[1] in tiers
    ]

    pipe = client.pipeline(transaction=False)
    for queue in queues:
        count_ready(pipe, ns, queue)
        pipe.hlen(f"{ns}:{dq_name(queue)}.msgs")
        for worker in workers:
            pipe.scard(f"{ns}:__acks__.{worker}.{queue}")
    for key in group_keys:
        pipe.zrange(f"{ns}:group:{key}", 0, -1)
        pipe.llen(f"{ns}:group:{key}:parked")
    replies = iter(pipe.execute())
    failed = DeadLetters(broker.jobs).counts(queues)

    rows = []
    for queue in queues:
        family, tier = _family_of_queue(queue)
        row = QueueRow(tier, family, queue, waiting=ready_from(replies))
        row.delayed = int(next(replies))
        row.active = sum(int(next(replies)) for _ in workers)
        row.failed = failed[queue]
        rows.append(row)

    groups = _groups(platform, broker, group_keys, replies)
    parked: defaultdict[str, int] = defaultdict(int)
    for group in groups:
        parked[group.queue] += group.parked
    for row in rows:
        row.parked = parked[row.queue]
    return Snapshot(rows, groups, len(workers))


def _groups(
    platform: Platform, broker: TierBroker, keys: list[str], it: Iterator[Any]
) -> list[Group]:
    families = platform.registry.by_name()
    members_of: dict[str, list[str]] = {}
    groups = []
    for key in keys:
        members = [as_text(m) for m in next(it)]
        queue, _, owner = key.partition("|")
        family_name, tier = _family_of_queue(queue)
        family = families.get(family_name)
        cap = (family.group_caps or {}).get(tier) if family else None
        group = Group(key, queue, family_name, tier, owner, cap, parked=int(next(it)))
        members_of[key] = members
        groups.append(group)
    # The admitted jobs' states: running, or waiting in the queue (and at which message).
    pipe = broker.client.pipeline(transaction=False)
    for group in groups:
        for job_id in members_of[group.key]:
            pipe.hmget(broker.jobs.record_key(job_id), "state", "cur")
    states = iter(pipe.execute())
    for group in groups:
        for _ in members_of[group.key]:
            state, cur = (as_text(v) if v is not None else "" for v in next(states))
            if state == "waiting" and cur:
                group.waiting_ids.append(cur)
            elif state == "active":
                group.running += 1
    return groups
