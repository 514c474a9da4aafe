"""One organization's page: what it has queued, parked, delayed, running and failed, and
what its delayed jobs wait for.

Its groups and running jobs come from ``groups_view`` and ``busy``, its failures from
``failures``. Parked jobs are read from each of its groups' parked lists (the first
:data:`LIST_LIMIT` of each); delayed jobs from every delay queue's messages (``<queue>.DQ``),
those carrying the organization (the ``st_org`` option), up to :data:`SCAN_LIMIT` messages
per queue, with their due time and, from their records, why they wait (``last_delay``: a
rate window, named by family, provider and scope; a provider's Retry-After; an outage; a
retry's backoff).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from dramatiq.common import dq_name
from dramatiq.message import Message

from services.app.bootstrap import Platform
from tiers.job_store import as_text
from tiers.options import ETA, JOB_ID, ORGANIZATION, PROVIDER, WINDOW_SCOPE

LIST_LIMIT = 50
SCAN_LIMIT = 2000


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    queue: str
    due_ms: int  # a delayed job's due time; 0 for a parked one
    why: str  # a delayed job's last delay reason


def parked_jobs(platform: Platform, group_keys: list[str]) -> list[QueuedJob]:
    """The first :data:`LIST_LIMIT` parked jobs of each group, in the order they will run."""
    ns = platform.settings.redis_namespace
    found = []
    for key in group_keys:
        client = platform.brokers.of_queue(key.partition("|")[0]).client
        ids = [as_text(i) for i in client.lrange(f"{ns}:group:{key}:parked", 0, LIST_LIMIT - 1)]
        if not ids:
            continue
        messages: Any = client.hmget(f"{ns}:group:{key}:parked.msgs", ids)
        for data in messages:
            message = _decode(data)
            if message is not None:
                found.append(
                    QueuedJob(message.options.get(JOB_ID, ""), key.partition("|")[0], 0, "")
                )
    return found


def delayed_jobs(platform: Platform, org: str) -> list[QueuedJob]:
    """``org``'s delayed jobs, soonest due first, with why each waits."""
    ns = platform.settings.redis_namespace
    queues = sorted({q for family in platform.registry for q in family.queues()})
    found: list[QueuedJob] = []
    for queue in queues:
        broker = platform.brokers.of_queue(queue)
        raw: Any = broker.client.hscan(f"{ns}:{dq_name(queue)}.msgs", 0, count=SCAN_LIMIT)[1]
        mine = [m for m in map(_decode, raw.values()) if m and m.options.get(ORGANIZATION) == org]
        if not mine:
            continue
        pipe = broker.client.pipeline(transaction=False)
        for message in mine:
            pipe.hget(broker.jobs.record_key(message.options.get(JOB_ID, "")), "last_delay")
        for message, why in zip(mine, pipe.execute(), strict=True):
            options = message.options
            eta = int(options.get(ETA, 0) or 0)
            # the record's last delay reads "<reason>: <reason>: delayed until <epoch>"; the
            # due column has the time, so the reason alone is shown
            reason = as_text(why).partition(":")[0] if why else "retry backoff"
            if reason == "window":  # which window: the message's provider and scope
                provider = str(options.get(PROVIDER) or "*").lower()
                reason = (
                    f"window {message.actor_name}:{provider}:{options.get(WINDOW_SCOPE) or '*'}"
                )
            found.append(QueuedJob(options.get(JOB_ID, ""), queue, eta, reason))
    return sorted(found, key=lambda job: job.due_ms)


def waits(delayed: list[QueuedJob]) -> list[tuple[str, int]]:
    """What the delayed jobs wait for (a rate window, named ``window
    <family>:<provider>:<scope>``; otherwise the reason's kind: ``retry-after``, ``outage``,
    ``test``...) and how many wait for each."""
    return Counter(job.why or "retry backoff" for job in delayed).most_common()


def _decode(data: Any) -> Message[Any] | None:
    if data is None:
        return None
    try:
        return Message.decode(data)
    except Exception:  # an undecodable message: the broker dead-letters it when it comes up
        return None
