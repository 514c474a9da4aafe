"""The Dramatiq Redis broker with job identity: an id is registered with its message."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import uuid4

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import current_millis, dq_name
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from tiers.job_store import EnqueueResult, JobStore

log = logging.getLogger(__name__)

#: Set on a delivered message once the settle script has acknowledged it to Dramatiq.
ACKED_IN_SETTLE = "_st_acked_in_settle"


class TierConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer, plus:

    - ``ack`` is skipped (no round trip) for a message the settle script already acked;
    - messages handed back unrun (``requeue``, on shutdown) have their fetch-time claim undone
      first, and ``close`` hands back the fetched messages no thread has taken yet.
    """

    broker: TierBroker

    def ack(self, message: Any) -> None:
        self.broker.jobs.claimed_at_fetch.pop(message.options.get("redis_message_id"), None)
        if getattr(message, ACKED_IN_SETTLE, False):
            self.queued_message_ids.discard(message.message_id)
            return
        super().ack(message)  # type: ignore[no-untyped-call]

    def nack(self, message: Any) -> None:
        self.broker.jobs.claimed_at_fetch.pop(message.options.get("redis_message_id"), None)
        super().nack(message)  # type: ignore[no-untyped-call]

    def requeue(self, messages: Iterable[Any]) -> None:
        messages = list(messages)
        if not messages:
            return
        try:
            # Before they are back in the queue, where another worker may claim them.
            self.broker.jobs.unclaim_unstarted(messages)
            super().requeue(messages)  # type: ignore[no-untyped-call]
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def close(self) -> None:
        cached, self.message_cache = self.message_cache, []
        messages = [MessageProxy(Message.decode(data)) for data in cached if data is not None]
        if messages:
            try:
                self.requeue(messages)
            except ConnectionClosed:
                log.warning(
                    "could not hand %d fetched message(s) back to %s; they return once this "
                    "worker's heartbeat expires",
                    len(messages),
                    self.queue_name,
                )
        super().close()


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

    @property
    def consumer_class(self) -> type[TierConsumer]:
        return TierConsumer

    def do_fetch(self, queue_name: str, count: int) -> list[bytes | None]:
        """Dramatiq's fetch, then (main queues) one claim for the batch's jobs without a
        group. When that claim cannot reach Redis the messages are claimed one by one when
        their runs start, as grouped ones always are."""
        messages: list[bytes | None] = self._dispatch("fetch")(  # type: ignore[no-untyped-call]
            queue_name, count
        )
        if messages and not queue_name.endswith(".DQ"):
            decoded = []
            for data in messages:
                try:
                    if data is not None:
                        decoded.append(Message.decode(data))
                except Exception:  # Dramatiq reports it when the consumer decodes it
                    continue
            try:
                self.jobs.claim_fetched(decoded)
            except Exception as exc:  # the fetched messages must reach the consumer regardless
                log.warning("claiming a fetched batch failed (%r); claiming at start", exc)
        return messages

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
