"""The worker's side of the queues: Dramatiq's consumer and consumer thread, made to keep
every message they hold across a Redis blip.

=====================================  ==============================================
what happens                            what the tier consumer does
=====================================  ==============================================
Redis unreachable while fetching        delayed messages held in memory are KEPT (they
                                        are still this worker's in Redis) and moved once
                                        Redis answers; Dramatiq drops them, which left
                                        them in a live worker's ack set for good
Redis refuses writes (out of memory     the same wait and retry. Any outage is logged
under ``noeviction``, a read-only       once per worker when it begins, every 30 s while
replica during a failover)              it lasts and once when the last consumer answers
                                        (``tiers.outage_log.SharedOutage``), not as a
                                        traceback per poll
prefetched messages when the consumer   handed back to the queue; if Redis is down they
restarts                                are served by the next consumer of the queue
the prefetch buffer is nearly full,     no fetch until a quarter of it is free (and no
                                        more than that fetched at once), and after
or the queue only trickles in           a fetch that found fewer messages than it asked
                                        for, none until the worker threads have little
                                        left (twice their number)
                                        (Dramatiq fetches after every ack: a round trip
                                        for a handful of messages, or for one, when a
                                        group's settles feed its queue one by one); each
                                        message is decoded once
a delayed message is due                moved to its queue and its delayed copy acked in
                                        one script (``promote.lua``): a crash between
                                        the two cannot make a finished job run again;
                                        the queue's consumer here is woken (it may sleep)
the worker stops                        prefetched and delayed messages handed back
=====================================  ==============================================
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from queue import PriorityQueue
from typing import TYPE_CHECKING, Any

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.common import compute_backoff, current_millis, iter_queue, q_name
from dramatiq.errors import BrokerConnectionError, ConnectionClosed
from dramatiq.message import Message
from dramatiq.worker import ConsumerThread

from tiers.ack_retries import AckRetries
from tiers.faults import fault_point
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.outage_log import SharedOutage
from tiers.queue_watch import IDLE_FETCHES, QueueWatch
from tiers.redis_retry import REDIS_DOWN, REDIS_REFUSING
from tiers.settling import ACKED_IN_SETTLE, SETTLING, Settling
from tiers.thread_stop import StopHonoured

if TYPE_CHECKING:
    from tiers.broker import TierBroker

log = logging.getLogger(__name__)

#: The longest a consumer waits before reconnecting after an error; it waits no longer than
#: the poll interval, so work resumes within a poll of Redis coming back.
RESTART_DELAY_SECONDS = 1.0


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
      once no more than twice its worker threads of its messages are left (a thread's worth
      still waits for a thread while the fetch is on its way); and it hands out the
      messages the fetch decoded (``TierBroker.fetch_messages``);
    - ``ack`` is skipped (no round trip) for a message a script already acked;
    - messages handed back unrun (``requeue``, on shutdown) have their fetch-time claim undone
      first, and ``close`` hands back the fetched messages no thread has taken yet; when
      Redis cannot take them, the next consumer of the queue in this process serves them.
    """

    broker: TierBroker

    def __init__(self, broker: TierBroker, queue_name: str, prefetch: int, timeout: int) -> None:
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
            return outstanding <= 2 * self.worker_threads
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

    def ack(self, message: Any) -> None:
        redis_id = message.options.get(REDIS_MESSAGE_ID)
        self.broker.jobs.take_fetch_claim(redis_id)
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


class TierConsumerThread(StopHonoured, ConsumerThread):
    """One queue's consumer thread: fetch, hand messages to the worker threads, move due
    delayed messages; on a Redis error, wait and start a new consumer without forgetting
    the delayed messages this worker holds. A ``stop()`` that comes before the thread runs
    is kept (``tiers.thread_stop``)."""

    broker: TierBroker
    #: The worker threads its messages go to; None for a delay queue's consumer.
    worker_threads: int | None = None
    #: The worker's queue watch, which its consumer sleeps on while the queue is idle.
    watch: QueueWatch | None = None
    #: Where an ack that failed in the settle sender is retried (None: Dramatiq's retry,
    #: in the calling thread).
    ack_retries: AckRetries | None = None
    #: The outage reporting the worker's consumers share: one warning per outage for all of
    #: them (None: this consumer's own).
    outage: SharedOutage | None = None

    def _next_due(self) -> float | None:
        held = self.delay_queue.queue  # a heap: the earliest eta first (this thread's own)
        return max(0.0, (held[0].priority - current_millis()) / 1000) if held else None

    def stop(self) -> None:
        super().stop()
        self.broker.wake_event(self.queue_name).set()  # a sleeping consumer sees it now

    def pause(self) -> None:
        super().pause()
        self.broker.wake_event(self.queue_name).set()

    def run(self) -> None:
        self.running = True
        self.broker.emit_after("consumer_thread_boot", self)
        recovering = False
        #: False while this consumer is in an outage (True: it answered since, or never failed).
        recovered = True
        queue = self.queue_name
        outage = self.outage or SharedOutage(log, f"consumer of {queue}")
        while self.running:
            if self.paused:
                self.paused_event.set()
                time.sleep(self.worker_timeout / 1000)
                continue
            try:
                if recovering:
                    self.broker.recover_unheld(self.queue_name)
                    recovering = False
                self.consumer = self.broker.consume(
                    queue_name=self.queue_name, prefetch=self.prefetch, timeout=self.worker_timeout
                )
                if isinstance(self.consumer, TierConsumer):
                    self.consumer.worker_threads = self.worker_threads
                    self.consumer.watch = self.watch
                    self.consumer.next_due = self._next_due
                for message in self.consumer:
                    if not recovered:  # a fetch answered: the outage is over for it
                        outage.recovered(queue)
                        recovered = True
                    if message is not None:
                        self.handle_message(message)
                    elif self.paused:
                        break
                    self.handle_delayed_messages()
                    if not self.running:
                        break
            except BrokerConnectionError as exc:
                kept = self.delay_queue.qsize()
                outage.failed(queue, f"lost redis, {kept} delayed message(s) kept", exc)
                recovered = False
            except REDIS_DOWN as exc:
                outage.failed(queue, "cannot reach redis", exc)
                recovered = False
            except REDIS_REFUSING as exc:
                outage.failed(queue, "redis refuses writes", exc)
                recovered = False
            except Exception:
                log.critical("consumer of %s failed; restarting it", self.queue_name, exc_info=True)
            if self.running:
                recovering = True
                self._close_consumer()
                time.sleep(min(RESTART_DELAY_SECONDS, self.worker_timeout / 1000))
        self.broker.emit_before("consumer_thread_shutdown", self)

    def post_process_message(self, message: MessageProxy) -> None:
        """Dramatiq's ack or nack, once the run's settle (if it is on its way) is answered.
        That answer comes in the settle sender's thread, shared by every settle of the
        worker: there the ack is tried once, and when the connection fails it is retried
        by the worker's ``ack_retries`` (``tiers.ack_retries``), not by Dramatiq's 5 s
        sleep in that thread."""
        settling: Settling | None = getattr(message, SETTLING, None)
        if settling is None:
            super().post_process_message(message)
        elif self.ack_retries is None:
            settling.then(lambda: ConsumerThread.post_process_message(self, message))
        else:
            settling.then(lambda: self._ack_or_hand_over(message))

    def _ack_or_hand_over(self, message: MessageProxy) -> None:
        try:
            self._ack_once(message)
        except BrokerConnectionError as exc:
            log.info("ack of %s failed (%s); retried apart", message.message_id, exc)
            assert self.ack_retries is not None
            self.ack_retries.submit(lambda: self._ack_once(message))

    def _ack_once(self, message: MessageProxy) -> None:
        """Dramatiq's ack (or nack, for a failed message) with its signals, tried once.

        Raises:
          BrokerConnectionError: Redis could not be reached.
        """
        consumer = self.consumer
        assert consumer is not None
        signal = "nack" if message.failed else "ack"
        self.broker.emit_before(signal, message)
        if message.failed:
            consumer.nack(message)
        else:
            consumer.ack(message)
        self.broker.emit_after(signal, message)

    def handle_delayed_messages(self) -> None:
        """Move every due delayed message to its queue, each in one atomic step."""
        if not self.delay_queue.queue:
            # Called after every message; only this thread fills its delay queue, so an
            # empty look is exact (a main queue's consumer: always), and costs no lock and
            # no raised Empty.
            return
        for item in iter_queue(self.delay_queue):  # type: ignore[no-untyped-call]
            message = item.message
            if item.priority > current_millis():
                self.delay_queue.put(item)
                self.delay_queue.task_done()
                return
            try:
                fault_point("promote.before")
                verdict = self.broker.jobs.promote(
                    message, q_name(message.queue_name), self.broker.broker_id
                )
            except REDIS_DOWN as exc:
                self.delay_queue.put(item)  # still ours in Redis; moved when it answers
                self.delay_queue.task_done()
                raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
            fault_point("promote.after")
            if verdict == "moved":
                # Its queue's consumer here may be asleep (an idle queue): it fetches now,
                # not at the queue watch's next look.
                self.broker.wake(q_name(message.queue_name))
            else:
                log.info("delayed job %s not moved: %s", message.options.get(JOB_ID), verdict)
            setattr(message, ACKED_IN_SETTLE, True)
            self.post_process_message(message)
            self.delay_queue.task_done()

    def _close_consumer(self) -> None:
        if self.consumer is None:
            return
        with contextlib.suppress(BrokerConnectionError):
            self.consumer.close()

    def close(self) -> None:
        """The worker is stopping: hand delayed and prefetched messages back."""
        if self.consumer is None:
            return
        delayed = [item.message for item in iter_queue(self.delay_queue)]  # type: ignore[no-untyped-call]
        try:
            self.requeue_messages(delayed)
        except BrokerConnectionError:
            log.warning(
                "redis unreachable: %d delayed message(s) of %s return once this worker's "
                "heartbeat expires",
                len(delayed),
                self.queue_name,
            )
        self.delay_queue = PriorityQueue()
        self._close_consumer()
