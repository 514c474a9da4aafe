"""Queue depth per tier, read from Redis when ``/metrics`` is scraped.

``speedtier_queue_depth{tier, family, state}``: ``ready`` (in the queue, runnable now),
``delayed`` (waiting for their time: retries, window and outage delays), ``parked`` (held in
their group's list because the group is at its cap; read from the groups with live slots,
``<ns>:__leases__``) and ``failed`` (in the dead-letter set), each from its tier's Redis.
One process reads it (the API): a gauge written by every worker would be counted once per
pod. The chart's KEDA triggers read the same Redis lists as ``ready``; a Prometheus trigger on
``sum(speedtier_queue_depth{tier="fast",state="ready"})`` would scale a tier the same way.

Read in the same scrape, for the chart's alerts:

=============================================  ===============================================
gauge                                          what it is
=============================================  ===============================================
``speedtier_queue_oldest_age_seconds``         how long the oldest ready message of each
``{tier, family}``                             queue has waited: since it became runnable (its
                                               ``eta`` for a delayed one, else its enqueue
                                               time); 0 for an empty queue. Both ends of the
                                               list are read: a redelivered message may sit
                                               at either
``speedtier_redis_memory_used_bytes{tier}``    ``INFO memory`` of the Redis serving the tier:
``speedtier_redis_memory_max_bytes{tier}``     ``used_memory`` and ``maxmemory`` (0: no limit)
=============================================  ===============================================
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from prometheus_client.core import GaugeMetricFamily, Metric

from shared.config import TIER_NAMES
from tiers.broker import TierBroker
from tiers.fair_order import fair_key, list_key
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
        clock: Callable[[], float] = time.time,
    ):
        self.brokers = brokers if isinstance(brokers, TierBrokers) else TierBrokers(brokers)
        self.queues_of_tier = queues_of_tier
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "speedtier_queue_depth",
            "Messages per tier, family and state (ready, delayed, failed), read at scrape time.",
            labels=["tier", "family", "state"],
        )
        up = GaugeMetricFamily(
            "speedtier_queue_depth_up", "1 when Redis answered the depth scrape, else 0."
        )
        oldest = GaugeMetricFamily(
            "speedtier_queue_oldest_age_seconds",
            "Seconds the oldest ready message of each queue has waited to run (0: empty).",
            labels=["tier", "family"],
        )
        used = GaugeMetricFamily(
            "speedtier_redis_memory_used_bytes",
            "used_memory of the Redis serving the tier.",
            labels=["tier"],
        )
        limit = GaugeMetricFamily(
            "speedtier_redis_memory_max_bytes",
            "maxmemory of the Redis serving the tier (0: no limit).",
            labels=["tier"],
        )
        try:
            parked = self.parked_by_queue()
            for tier in TIER_NAMES:
                queues = list(self.queues_of_tier(tier))
                broker = self.brokers.of_tier(tier)
                depths = broker.queue_depths(queues)
                failures = broker.queue_failures(queues)
                ages = self.oldest_ages(broker, queues)
                for queue in queues:
                    family = queue.rsplit(".", 1)[0]
                    ready, delayed = depths[queue]
                    depth.add_metric([tier, family, "ready"], ready)
                    depth.add_metric([tier, family, "delayed"], delayed)
                    depth.add_metric([tier, family, "parked"], parked.get(queue, 0))
                    depth.add_metric([tier, family, "failed"], failures[queue])
                    oldest.add_metric([tier, family], ages[queue])
            for broker, tiers in self.brokers.serving():
                memory = cast(dict[str, Any], broker.client.info("memory"))
                for tier in tiers:
                    used.add_metric([tier], float(memory.get("used_memory", 0)))
                    limit.add_metric([tier], float(memory.get("maxmemory", 0)))
        except REDIS_DOWN as exc:
            log.warning("queue depth scrape: redis unreachable (%s)", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield depth
        yield oldest
        yield used
        yield limit
        yield up

    def oldest_ages(self, broker: TierBroker, queues: Sequence[str]) -> dict[str, float]:
        """queue -> seconds its oldest ready message has waited (0 when empty): the messages
        at both ends of the list and the next one of the fair order (the oldest of a busy
        group's, or a new group's), read in two pipelined round trips."""
        client, ns = broker.client, broker.namespace
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            pipe.lindex(list_key(ns, queue), 0)
            pipe.lindex(list_key(ns, queue), -1)
            pipe.zrange(fair_key(ns, queue), 0, 0)
        ends = pipe.execute()
        pipe = client.pipeline(transaction=False)
        asked: list[str] = []
        for i, queue in enumerate(queues):
            found = [*ends[3 * i : 3 * i + 2], *ends[3 * i + 2]]
            for redis_id in {end for end in found if end is not None}:
                pipe.hget(f"{ns}:{queue}.msgs", redis_id)
                asked.append(queue)
        now = self.clock()
        ages = dict.fromkeys(queues, 0.0)
        for queue, data in zip(asked, pipe.execute(), strict=True):
            since = runnable_since(data)
            if since is not None:
                ages[queue] = max(ages[queue], now - since)
        return ages

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


def runnable_since(data: bytes | None) -> float | None:
    """When an encoded message became runnable, in epoch seconds: its ``eta`` (a delayed
    message moved to its queue when due) or else its enqueue time; None when unreadable."""
    if not data:
        return None
    try:
        message = json.loads(data)
        options = message.get("options") or {}
        stamp = options.get("eta") or message["message_timestamp"]
        return float(stamp) / 1000
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
