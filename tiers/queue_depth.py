"""Queue depth per tier, read from Redis when ``/metrics`` is scraped.

``speedtier_queue_depth{tier, family, state}``: ``ready`` (in the queue, runnable now),
``delayed`` (waiting for their time: retries, window and outage delays) and ``failed`` (in the
dead-letter set). One process reads it (the API): a gauge written by every worker would be
counted once per pod. KEDA's Prometheus trigger scales a tier on the sum of its ``ready``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from shared.config import TIER_NAMES
from tiers.broker import TierBroker
from tiers.redis_retry import REDIS_DOWN

log = logging.getLogger(__name__)


class QueueDepthCollector:
    """A scrape-time collector over every registered queue.

    Parameters:
      broker: the tier broker (its Redis client).
      queues_of_tier: tier -> the queues a worker of that tier consumes (the registry's).
    """

    def __init__(self, broker: TierBroker, queues_of_tier: Callable[[str], Sequence[str]]):
        self.broker = broker
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
            for tier in TIER_NAMES:
                queues = list(self.queues_of_tier(tier))
                depths = self.broker.queue_depths(queues)
                failures = self.broker.queue_failures(queues)
                for queue in queues:
                    family = queue.rsplit(".", 1)[0]
                    ready, delayed = depths[queue]
                    depth.add_metric([tier, family, "ready"], ready)
                    depth.add_metric([tier, family, "delayed"], delayed)
                    depth.add_metric([tier, family, "failed"], failures[queue])
        except REDIS_DOWN as exc:
            log.warning("queue depth scrape: redis unreachable (%s)", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield depth
        yield up
