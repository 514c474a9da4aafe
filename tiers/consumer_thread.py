"""One queue's consumer thread: Dramatiq's, made to keep every message it holds across a
Redis blip and to move delayed messages back to their queues on time.

=====================================  ==============================================
what happens                            what the consumer thread does
=====================================  ==============================================
Redis unreachable while fetching        delayed messages held in memory are KEPT (they
                                        are still this worker's in Redis) and moved once
                                        Redis answers; Dramatiq drops them, which left
                                        them in a live worker's ack set for good; a new
                                        consumer first hands back what Redis lists as
                                        this worker's but no consumer holds (a lost
                                        fetch reply: ``TierBroker.recover_unheld``)
Redis refuses writes (out of memory     the same wait and retry. Any outage is logged
under ``noeviction``, a read-only       once per worker when it begins, every 30 s while
replica during a failover)              it lasts and once when the last consumer answers
                                        (``tiers.outage_log.SharedOutage``), not as a
                                        traceback per poll
a delayed message is due                moved to its queue and its delayed copy acked in
                                        one script (``promote.lua``): a crash between
                                        the two cannot make a finished job run again;
                                        the messages due together go in one round trip;
                                        the queue's consumer here is woken (it may sleep)
a run ends while its settle is on its   acked or nacked once the settle is answered, in
way                                     the settle sender's thread; an ack that cannot
                                        reach Redis is retried apart
                                        (``tiers.ack_retries``)
the worker stops                        delayed messages handed back, then the
                                        consumer's prefetched ones (``tiers.consumer``)
=====================================  ==============================================
"""

from __future__ import annotations

import contextlib
import logging
import time
from queue import PriorityQueue
from typing import TYPE_CHECKING, Any

from dramatiq.broker import MessageProxy
from dramatiq.common import current_millis, iter_queue, q_name
from dramatiq.errors import BrokerConnectionError, ConnectionClosed
from dramatiq.worker import ConsumerThread

from tiers.ack_retries import AckRetries
from tiers.consumer import TierConsumer
from tiers.faults import fault_point
from tiers.options import JOB_ID
from tiers.outage_log import SharedOutage
from tiers.queue_watch import QueueWatch
from tiers.redis_retry import REDIS_DOWN, REDIS_REFUSING
from tiers.settling import ACKED_IN_SETTLE, SETTLING, Settling
from tiers.thread_stop import StopHonoured

if TYPE_CHECKING:
    from tiers.broker import TierBroker

#: A queue's consumer and its thread log as one (the worker's shared outage reporting
#: writes to the same logger).
log = logging.getLogger("tiers.consumer")

#: The most due delayed messages moved in one round trip.
PROMOTE_BATCH = 200

#: The longest a consumer thread waits before reconnecting after an error; it waits no
#: longer than the poll interval, so work resumes within a poll of Redis coming back.
RESTART_DELAY_SECONDS = 1.0


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
            return
        consumer = self.consumer
        if isinstance(consumer, TierConsumer):
            consumer.ran(message)
        if self.ack_retries is None:
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
        """Move every due delayed message to its queue, each in one atomic step, up to
        ``PROMOTE_BATCH`` of them in one round trip: the starts a window reserved fall due
        at its opening, and moving them one round trip each made the last of them start
        late in its window."""
        if not self.delay_queue.queue:
            # Called after every message; only this thread fills its delay queue, so an
            # empty look is exact (a main queue's consumer: always), and costs no lock and
            # no raised Empty.
            return
        due = []
        for item in iter_queue(self.delay_queue):  # type: ignore[no-untyped-call]
            if item.priority > current_millis():
                self._keep([item])
                break
            due.append(item)
        for start in range(0, len(due), PROMOTE_BATCH):
            try:
                self._promote(due[start : start + PROMOTE_BATCH])
            except BaseException:
                self._keep(due[start + PROMOTE_BATCH :])
                raise

    def _promote(self, due: list[Any]) -> None:
        """Move the due delayed messages of ``due`` (items of the delay queue, taken from
        it) and forget them; keep those Redis could not move (still ours in Redis)."""
        messages = [item.message for item in due]
        try:
            fault_point("promote.before")
            verdicts = self.broker.jobs.promote(
                [(message, q_name(message.queue_name)) for message in messages],
                self.broker.broker_id,
            )
        except REDIS_DOWN as exc:
            self._keep(due)  # moved when it answers
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        fault_point("promote.after")
        refused: list[tuple[Any, Exception]] = []
        woken = set()
        for item, verdict in zip(due, verdicts, strict=True):
            message = item.message
            if not isinstance(verdict, str):
                refused.append((item, verdict))
                continue
            if verdict == "moved":
                woken.add(q_name(message.queue_name))
            else:
                log.info("delayed job %s not moved: %s", message.options.get(JOB_ID), verdict)
            setattr(message, ACKED_IN_SETTLE, True)
            self.post_process_message(message)
            self.delay_queue.task_done()
        # The queues' consumers here may be asleep (idle queues): they fetch now, not at the
        # queue watch's next look.
        for queue in woken:
            self.broker.wake(queue)
        if refused:
            self._keep([item for item, _error in refused])
            raise refused[0][1]

    def _keep(self, items: list[Any]) -> None:
        """Put delay-queue items taken out back, as still held."""
        for item in items:
            self.delay_queue.put(item)
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
