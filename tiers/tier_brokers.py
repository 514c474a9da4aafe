"""Which Redis each tier uses: its own for what belongs to the tier, the control Redis
(``REDIS_URL``) for what every tier shares.

A tier without a Redis of its own (``SPEEDTIER_<TIER>_REDIS_URL`` unset) uses the control
Redis; on one Redis there is one broker and nothing here changes what runs.

=======================================  ==========  =======================================
keys                                     Redis       why there
=======================================  ==========  =======================================
queues, delay queues, dead letters,      the tier's  Dramatiq's fetch, ack and requeue
Dramatiq's acknowledgement sets and                  scripts touch a queue and its workers'
worker heartbeats                                    sets in one call; a worker consumes
                                                     one tier only
job records (identity, durable job       the tier's  the identity script registers an id
state), group slots, leases, parked                  and pushes its message in one atomic
lists                                                call; settle frees a slot and hands it
                                                     on in one call
run rates (``<ns>:rates:<minute>``)      the tier's  counted once per run by its worker
provider windows and their               control     one window is shared by jobs of
reservations                                         several tiers (the embeddings API from
                                                     fast and slow ingestion, a crawled
                                                     host, one provider scope)
scheduler leader lock, tick emissions    control     one scheduler per deployment (the
                                                     ticks' jobs go to the maintenance
                                                     tier's Redis, through the router)
super sources' webhook replay keys,      control     per provider and source, not per tier
counters and rate-limit state
``speedtier up``'s namespace claim       control     one ``up`` per namespace
kill switches (pause flags)              neither     Flipper's tables in PostgreSQL, read at
                                                     tick time and again at execution
=======================================  ==========  =======================================

A job id lives in exactly one Redis, its tier's, which the router resolves from the request
(``Family.tier_of``). For a family with a fixed tier that is the family's tier. A family
routed by provider keeps identity exact because an id always comes with the same provider:
every such id names something whose provider does not change (a source, a document, a
connection, a webhook delivery of one source); the same id sent with another provider would
be a second job in the other tier's Redis.
"""

from __future__ import annotations

from collections.abc import Mapping

from dramatiq.common import q_name

from tiers.broker import TierBroker
from tiers.table import TIERS


class TierBrokers:
    """The broker of each tier; tiers configured with the same Redis share one broker.

    Parameters:
      control: the broker on the control Redis (``REDIS_URL``): what every tier shares
        lives on its client, and every tier without a Redis of its own uses it.
      by_tier: tier -> broker, for tiers with a Redis of their own.
    """

    def __init__(self, control: TierBroker, by_tier: Mapping[str, TierBroker] | None = None):
        self.control = control
        self._by_tier = dict(by_tier or {})

    def of_tier(self, tier: str) -> TierBroker:
        return self._by_tier.get(tier, self.control)

    def of_queue(self, queue: str) -> TierBroker:
        """The broker of a queue ``<family>.<tier>`` (or of its delay or dead-letter queue)."""
        return self.of_tier(q_name(queue).rpartition(".")[2])

    def every(self) -> list[TierBroker]:
        """Each broker once, the control broker first."""
        found = {id(self.control): self.control}
        for broker in self._by_tier.values():
            found.setdefault(id(broker), broker)
        return list(found.values())

    def serving(self) -> list[tuple[TierBroker, tuple[str, ...]]]:
        """Each broker that serves a tier, with its tiers (in the tier table's order)."""
        tiers: dict[int, list[str]] = {}
        brokers: dict[int, TierBroker] = {}
        for tier in TIERS:
            broker = self.of_tier(tier)
            brokers[id(broker)] = broker
            tiers.setdefault(id(broker), []).append(tier)
        return [(brokers[key], tuple(names)) for key, names in tiers.items()]

    def find(self, job_id: str) -> tuple[TierBroker, dict[str, str]] | None:
        """The broker holding job ``job_id`` and its record, or None when no Redis has it.

        Each Redis that serves a tier is asked in turn (one round trip on one Redis). A
        record whose queue belongs to another Redis is a leftover from before its tier got a
        Redis of its own (it expires with its retention) and is passed over.
        """
        for broker, _tiers in self.serving():
            record = broker.jobs.record(job_id)
            if record is None:
                continue
            queue = record.get("queue")
            if not queue or self.of_queue(queue) is broker:
                return broker, record
        return None

    def record(self, job_id: str) -> dict[str, str] | None:
        """Job ``job_id``'s record from the Redis that holds it (see :meth:`find`)."""
        found = self.find(job_id)
        return found[1] if found else None

    def broker_of_job(self, job_id: str) -> TierBroker:
        """The broker holding job ``job_id``, or the control broker when none does (whose
        answers then say the job is unknown)."""
        found = self.find(job_id)
        return found[0] if found else self.control

    def close(self) -> None:
        for broker in self.every():
            broker.close()
