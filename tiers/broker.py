"""The Dramatiq Redis broker with job identity: an id is registered with its message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, dq_name
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from tiers.job_store import EnqueueResult, JobStore


class TierBroker(RedisBroker):
    """A RedisBroker whose messages that carry a job id (option ``st_job``) go through the
    identity script: the id's record and the message are written in one atomic step, an id
    that is already live is not enqueued twice, and a group over its cap parks the message.

    Parameters:
      namespace: Redis key prefix for queues, job records, groups and windows.
      lease_seconds: how long a running job's group slot survives its worker going silent.
      heartbeat_timeout_ms: after this long without a heartbeat a worker's unacked messages
        are returned to their queues.
      url / client: where Redis is.
    """

    def __init__(
        self,
        *,
        namespace: str,
        middleware: Sequence[Middleware] | None = None,
        url: str | None = None,
        client: Any = None,
        lease_seconds: float = 30.0,
        heartbeat_timeout_ms: int = 60_000,
        maintenance_chance: int = 10_000,
    ) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            url=url,
            client=client,
            namespace=namespace,
            middleware=list(middleware) if middleware is not None else [],
            heartbeat_timeout=heartbeat_timeout_ms,
            maintenance_chance=maintenance_chance,
        )
        self.jobs = JobStore(self.client, namespace, lease_seconds)

    @staticmethod
    def prepare(message: Message[Any], delay: int | None = None) -> Message[Any]:
        """Give the message its per-enqueue Redis id (and an eta when delayed)."""
        prepared = message.copy(options={"redis_message_id": str(uuid4())})
        if delay is not None:
            prepared = prepared.copy(
                queue_name=dq_name(prepared.queue_name),
                options={"eta": current_millis() + delay},
            )
        return prepared

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        if "st_job" not in message.options:
            return super().enqueue(message, delay=delay)
        prepared = self.prepare(message, delay)
        self.emit_before("enqueue", prepared, delay)
        self.jobs.enqueue_many([prepared])
        self.emit_after("enqueue", prepared, delay)
        return prepared

    def enqueue_identified(self, messages: Sequence[Message[Any]]) -> list[EnqueueResult]:
        """Enqueue messages carrying job ids in one round trip; report each one's outcome."""
        prepared = [self.prepare(message) for message in messages]
        for message in prepared:
            self.emit_before("enqueue", message, None)
        results = self.jobs.enqueue_many(prepared)
        for message in prepared:
            self.emit_after("enqueue", message, None)
        return results

    def queue_depths(self, queue_names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``queue -> (ready, delayed)`` message counts."""
        pipe = self.client.pipeline(transaction=False)
        for name in queue_names:
            pipe.llen(f"{self.namespace}:{name}")
            pipe.hlen(f"{self.namespace}:{dq_name(name)}.msgs")
        replies = pipe.execute()
        return {
            name: (int(replies[2 * i]), int(replies[2 * i + 1]))
            for i, name in enumerate(queue_names)
        }
