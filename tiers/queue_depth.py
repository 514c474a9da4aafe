"""Queue depth per tier, read from Redis when ``/metrics`` is scraped.

``speedtier_queue_depth{tier, family, state}``: ``ready`` (in the queue, runnable now),
``delayed`` (waiting for their time: retries, window and outage delays), ``parked`` (held in
their group's list because the group is at its cap; read from the groups with live slots,
``<ns>:__leases__``) and ``failed`` (in the dead-letter set), each from its tier's Redis.
One process reads it (the API): a gauge written by every worker would be counted once per
pod. The chart's KEDA triggers read the same Redis lists as ``ready``; a Prometheus trigger on
``sum(speedtier_queue_depth{tier="fast",state="ready"})`` would scale a tier the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client.core import GaugeMetricFamily, Metric

from shared.config import TIER_NAMES
from tiers.broker import TierBroker
from tiers.job_store import as_text
from tiers.redis_retry import REDIS_DOWN
from tiers.tier_brokers import TierBrokers

log = logging.getLogger(__name__)


class QueueDepthCollector:
    """A scrape-time collector over every registered queue.

    Parameters:
      brokers: each tier's broker (its Redis client), or one broker for every tier.
      queues_of_tier: tier -> the queues a worker of that tier consumes (the registry's).
    """

    def __init__(
        self,
        brokers: TierBrokers | TierBroker,
        queues_of_tier: Callable[[str], Sequence[str]],
    ):
        self.brokers = brokers if isinstance(brokers, TierBrokers) else TierBrokers(brokers)
        self.queues_of_tier = queues_of_tier

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "speedtier_queue_depth",
            "Messages per tier, family and state (ready, delayed, failed), read at scrape time.",
            labels=["tier", "family", "state"],
        )
        up = GaugeMetricFamily(
            "speedtier_queue_depth_up", "1 when Redis answered the depth scrape, else 0."
        )
        try:
            parked = self.parked_by_queue()
            for tier in TIER_NAMES:
                queues = list(self.queues_of_tier(tier))
                broker = self.brokers.of_tier(tier)
                depths = broker.queue_depths(queues)
                failures = broker.queue_failures(queues)
                for queue in queues:
                    family = queue.rsplit(".", 1)[0]
                    ready, delayed = depths[queue]
                    depth.add_metric([tier, family, "ready"], ready)
                    depth.add_metric([tier, family, "delayed"], delayed)
                    depth.add_metric([tier, family, "parked"], parked.get(queue, 0))
                    depth.add_metric([tier, family, "failed"], failures[queue])
        except REDIS_DOWN as exc:
            log.warning("queue depth scrape: redis unreachable (%s)", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield depth
        yield up

    def parked_by_queue(self) -> dict[str, int]:
        """queue -> messages parked in its groups (only groups with a live slot can hold any:
        a group parks only while full), from each Redis that serves a tier."""
        counts: dict[str, int] = {}
        for broker, tiers in self.brokers.serving():
            client, ns = broker.client, broker.namespace
            listed = cast(list[bytes], client.zrange(f"{ns}:__leases__", 0, -1))
            keys = [as_text(key) for key in listed]
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.llen(f"{ns}:group:{key}:parked")
            for key, count in zip(keys, pipe.execute(), strict=True):
                queue = key.partition("|")[0]
                if queue.rpartition(".")[2] in tiers:
                    counts[queue] = counts.get(queue, 0) + int(count)
        return counts
