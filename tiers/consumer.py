"""The worker's side of a queue: Dramatiq's Redis consumer, made to fetch in batches, to
hand out each message decoded once, and to keep every message it holds across a Redis blip.

=====================================  ==============================================
what happens                            what the tier consumer does
=====================================  ==============================================
prefetched messages when the consumer   handed back to the queue; if Redis is down they
restarts                                are served by the next consumer of the queue
the prefetch buffer is nearly full,     no fetch until a quarter of it is free (and no
                                        more than that fetched at once), and after
or the queue only trickles in           a fetch that found fewer messages than it asked
                                        for, none until the worker threads have little
                                        left to run (twice their number; runs whose
                                        settle is on its way count no more)
                                        (Dramatiq fetches after every ack: a round trip
                                        for a handful of messages, or for one, when a
                                        group's settles feed its queue one by one); each
                                        message is decoded once
the queue stays empty                   after a few empty fetches the consumer sleeps
                                        until the worker's queue watch sees a message
                                        there (``tiers.queue_watch``) or a settle of
                                        this process pushes one
Redis unreachable or refusing writes    the error reaches the consumer thread, which
                                        waits and starts a new consumer
                                        (``tiers.consumer_thread``)
=====================================  ==============================================
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.common import compute_backoff
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

from tiers.job_store import JobStore
from tiers.options import REDIS_MESSAGE_ID
from tiers.queue_watch import IDLE_FETCHES, QueueWatch
from tiers.redis_retry import REDIS_DOWN, REDIS_REFUSING
from tiers.settling import ACKED_IN_SETTLE

log = logging.getLogger(__name__)


class ConsumerBroker(Protocol):
    """What a :class:`TierConsumer` uses of its broker (``tiers.broker.TierBroker``, which
    builds it and so imports this module, not the other way round). The type checker cannot
    hold ``TierBroker`` to it (Dramatiq's broker answers any name through ``__getattr__``);
    the consumer's integration tests do."""

    jobs: JobStore
    #: queue -> messages it held after this process's last fetch from it.
    left_in_queue: dict[str, int]

    def fetch_messages(self, queue_name: str, count: int) -> list[Message[Any]]: ...

    def release_held(self, queue_name: str, redis_ids: Iterable[str]) -> None: ...

    def keep_leftovers(self, queue_name: str, messages: Iterable[Message[Any]]) -> None: ...

    def take_leftovers(self, queue_name: str) -> list[Message[Any]]: ...

    def wake_event(self, queue_name: str) -> threading.Event: ...


class FetchedMessage(MessageProxy):
    """Dramatiq's message proxy with the message's fields copied onto it: every middleware
    hook of a run reads them (``options``, ``actor_name``, ``queue_name``...), and through
    ``MessageProxy.__getattr__`` each read was a Python call. The message is a frozen
    dataclass, so the copies never go stale (``options`` is the same dict)."""

    def __init__(self, message: Message[Any]) -> None:
        super().__init__(message)
        fields = self.__dict__
        fields["queue_name"] = message.queue_name
        fields["actor_name"] = message.actor_name
        fields["args"] = message.args
        fields["kwargs"] = message.kwargs
        fields["options"] = message.options
        fields["message_id"] = message.message_id
        fields["message_timestamp"] = message.message_timestamp


def _nothing_due() -> float | None:
    return None


class TierConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer, plus:

    - it fetches when a quarter of its prefetch is free (at least one message), not after
      every ack, and no more than that quarter (or twice its worker threads) at a time,
      twice that from a queue its last fetch found holding at least twice as many more;
      after a fetch that found fewer messages than it asked for (the queue runs dry: it is
      fed as fast as it is drained, one message per settle for a group at its cap), only
      once no more than twice its worker threads of its messages are left to run (a
      thread's worth still waits for a thread while the fetch is on its way; a run whose
      settle is on its way is over, though its message is held until the answer); and it
      hands out the messages the fetch decoded (``TierBroker.fetch_messages``);
    - ``ack`` is skipped (no round trip) for a message a script already acked;
    - messages handed back unrun (``requeue``, on shutdown) have their fetch-time claim undone
      first, and ``close`` hands back the fetched messages no thread has taken yet; when
      Redis cannot take them, the next consumer of the queue in this process serves them.
    """

    broker: ConsumerBroker

    def __init__(
        self, broker: ConsumerBroker, queue_name: str, prefetch: int, timeout: int
    ) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self.message_cache = broker.take_leftovers(queue_name)
        #: Fetch once this many of the prefetch are free: enough fetched messages are still
        #: waiting for a worker thread meanwhile, and a fetch carries a batch, not a handful.
        self.refill_at = max(1, prefetch // 4)
        #: The worker threads this consumer's messages go to (None: a delay queue, whose
        #: messages wait for their time, not for a thread).
        self.worker_threads: int | None = None
        #: The last fetch found fewer messages than it asked for.
        self._trickling = False
        #: Ids of held messages whose run is over, their settle on its way (their ack comes
        #: with its answer): no thread waits for them, so a trickling queue's next fetch
        #: does not wait for them either.
        self.settling: set[str] = set()
        #: Set by the worker threads when an ack (or nack, or hand-back) frees enough room.
        self._room = threading.Event()
        #: Set when a settle of this process pushed a message to the queue: an empty fetch's
        #: backoff ends there (a grouped queue is fed one released message per settle).
        self._wake = broker.wake_event(queue_name)
        #: The worker's queue watch: once its queue is idle this consumer sleeps until the
        #: watch sees a message there, instead of polling (None: it polls).
        self.watch: QueueWatch | None = None
        #: Seconds until the earliest delayed message the consumer thread holds is due (None:
        #: it holds none). They are moved when due, after this consumer's wait: a delay
        #: queue's consumer holding some polls instead of sleeping, and waits no longer than
        #: that.
        self.next_due: Callable[[], float | None] = _nothing_due

    def __next__(self) -> MessageProxy | None:
        """The next fetched message; None when there is none to hand out this poll (the
        consumer thread then moves its due delayed messages and asks again)."""
        try:
            if self.message_cache:
                self.misses = 0
                message = self.message_cache.pop(0)
                self.queued_message_ids.add(message.message_id)
                return FetchedMessage(message)
            if not self._may_fetch():
                self._room.clear()
                if not self._may_fetch():  # checked again: an ack may have come in between
                    self._room.wait(self._until_due(self.timeout / 1000))
                return None
            asked = self._batch_size()
            # Cleared before the fetch: a release landing after it sets it again, so the
            # wait below cannot sleep through a message this fetch missed.
            self._wake.clear()
            self.message_cache = self.broker.fetch_messages(self.queue_name, asked)
            self._trickling = 0 < len(self.message_cache) < asked
            if self.message_cache:
                return self.__next__()
            self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=self.timeout)
            if self.watch is not None and self.misses > IDLE_FETCHES and self.next_due() is None:
                woken = self.watch.sleep(self.queue_name, self._wake)
            else:
                woken = self._wake.wait(self._until_due(backoff_ms / 1000))
            if woken:
                self.misses = 0
            return None
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def _until_due(self, seconds: float) -> float:
        """``seconds``, or less when a held delayed message is due sooner (it is moved on
        time, not up to a poll interval late)."""
        due = self.next_due()
        return seconds if due is None else min(seconds, due)

    def _may_fetch(self) -> bool:
        outstanding = len(self.queued_message_ids) + len(self.message_cache)
        free: int = self.prefetch - outstanding
        if free < self.refill_at:
            return False
        if self._trickling and self.worker_threads:
            return outstanding - len(self.settling) <= 2 * self.worker_threads
        return True

    def _batch_size(self) -> int:
        """How many messages to fetch: the free places, but no more than a share, a quarter
        of the prefetch (or twice the worker threads, when more): a queue that only trickles
        in is shared with the other workers, not taken whole by the first one to find it
        full. From a queue that held at least two more shares after the last fetch, two
        shares: there is plenty left for the others, and half the fetches carry the batch."""
        free: int = self.prefetch - len(self.queued_message_ids) - len(self.message_cache)
        if not self.worker_threads:
            return free
        share = max(self.refill_at, 2 * self.worker_threads)
        if self.broker.left_in_queue.get(self.queue_name, 0) >= 2 * share:
            share *= 2
        return min(free, share)

    def _freed(self) -> None:
        if self._may_fetch():
            self._room.set()

    def ran(self, message: Any) -> None:
        """``message``'s run is over and its settle on its way (its ack follows the answer):
        no thread waits for it, so a consumer of a queue that runs dry counts it no more."""
        self.settling.add(message.message_id)
        if self._trickling:
            self._freed()

    def ack(self, message: Any) -> None:
        redis_id = message.options.get(REDIS_MESSAGE_ID)
        self.broker.jobs.take_fetch_claim(redis_id)
        self.settling.discard(message.message_id)
        if getattr(message, ACKED_IN_SETTLE, False):
            self.queued_message_ids.discard(message.message_id)
        else:
            try:
                super().ack(message)  # type: ignore[no-untyped-call]
            except REDIS_REFUSING as exc:  # retried as a lost connection is
                raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        self.broker.release_held(self.queue_name, [redis_id])
        self._freed()

    def nack(self, message: Any) -> None:
        redis_id = message.options.get(REDIS_MESSAGE_ID)
        self.settling.discard(message.message_id)
        self.broker.jobs.take_fetch_claim(redis_id)
        try:
            super().nack(message)  # type: ignore[no-untyped-call]
        except REDIS_REFUSING as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        self.broker.release_held(self.queue_name, [redis_id])
        self._freed()

    def requeue(self, messages: Iterable[Any]) -> None:
        messages = list(messages)
        if not messages:
            return
        try:
            # Before they are back in the queue, where another worker may claim them.
            self.broker.jobs.unclaim_unstarted(messages)
            super().requeue(messages)  # type: ignore[no-untyped-call]
        except REDIS_DOWN as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        self.broker.release_held(
            self.queue_name, (message.options[REDIS_MESSAGE_ID] for message in messages)
        )
        self._freed()

    def close(self) -> None:
        cached = list(self.message_cache)
        self.message_cache = []
        if cached:
            try:
                self.requeue([FetchedMessage(message) for message in cached])
            except ConnectionClosed:
                log.warning(
                    "redis unreachable: %d prefetched message(s) of %s stay with this worker",
                    len(cached),
                    self.queue_name,
                )
                self.broker.keep_leftovers(self.queue_name, cached)
        super().close()
