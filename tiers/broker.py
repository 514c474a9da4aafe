"""The Dramatiq Redis broker with job identity: an id is registered with its message."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import uuid4

import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, dq_name, xq_name
from dramatiq.message import Message
from dramatiq.middleware import Middleware, MiddlewareError

from tiers.beat_log import BeatLog
from tiers.consumer import TierConsumer
from tiers.fair_order import count_ready, ready_from
from tiers.faults import fault_point
from tiers.fetch_screen import dead_letter, screen_fetch
from tiers.hooks import HookTable
from tiers.job_store import EnqueueResult, JobStore, as_text
from tiers.middleware.group_slots import GROUP_PARKED
from tiers.middleware.job_metrics import tier_of_queue
from tiers.options import ETA, JOB_ID, REDIS_MESSAGE_ID
from tiers.rate_window import WindowGuard
from tiers.script_send import ScriptSender
from tiers.settling import ACKED_IN_SETTLE

log = logging.getLogger(__name__)

#: The connection pool's cap for a broker built from a URL: none that a process reaches.
#: Each thread holds at most one of its connections at a time, so the threads bound it;
#: redis-py 6 and later cap a pool at 100 by default, and past that a worker's thread is
#: refused a connection ("Too many connections") instead of being given one. A URL's own
#: ``max_connections`` query parameter still wins.
POOL_MAX_CONNECTIONS = 2**31

__all__ = ["ACKED_IN_SETTLE", "TierBroker", "TierConsumer"]


class TierBroker(RedisBroker):
    """A RedisBroker whose messages that carry a job id (option ``st_job``) go through the
    identity script: the id's record and the message are written in one atomic step, an id
    that is already live is not enqueued twice, and a group over its cap parks the message.

    Parameters:
      namespace: Redis key prefix for queues, job records, groups and windows.
      lease_seconds: how long a running job's group slot survives its worker going silent.
      heartbeat_timeout_ms: after this long without a heartbeat a worker's unacked messages
        are returned to their queues.
      url / client: where Redis is (a client built from ``url`` has a pool of
        :data:`POOL_MAX_CONNECTIONS`).
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
    ) -> None:
        if client is None and url is not None:
            pool = redis.ConnectionPool.from_url(url, max_connections=POOL_MAX_CONNECTIONS)
            client = redis.Redis(connection_pool=pool)
        super().__init__(  # type: ignore[no-untyped-call]
            client=client,
            namespace=namespace,
            middleware=list(middleware) if middleware is not None else [],
            heartbeat_timeout=heartbeat_timeout_ms,
        )
        self.jobs = JobStore(self.client, namespace, lease_seconds)
        self.jobs.beats = BeatLog(heartbeat_timeout_ms)
        #: queue -> redis ids this process fetched and still holds (queued for a thread,
        #: running, waiting in a delay queue); what Redis says is ours beyond that was lost
        #: in transit and is handed back by :meth:`recover_unheld`.
        self._held: defaultdict[str, set[str]] = defaultdict(set)
        #: queue -> prefetched messages a closed consumer could not hand back (Redis was
        #: down).
        self._leftovers: defaultdict[str, list[Message[Any]]] = defaultdict(list)
        #: queue -> how many ready messages it held after this process's last fetch from it:
        #: its consumer takes bigger batches from a deep queue.
        self.left_in_queue: dict[str, int] = {}
        #: queue -> set when a settle of this process pushed a message to it (:meth:`wake`).
        self._wakes: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        #: The middleware hooking each signal (Dramatiq calls every middleware's).
        self._hooks = HookTable()
        #: Dramatiq's dispatch script (fetch, ack, nack, hand-back) goes on a connection of
        #: its own (``tiers.script_send``).
        self._dispatches = ScriptSender(self.client)

    def close(self) -> None:
        """Close the connections the job store and the dispatches keep (the client's pool
        is Dramatiq's, left as Dramatiq leaves it)."""
        self.jobs.close()
        self._dispatches.close()
        super().close()

    def _dispatch(
        self, command: str, *, maintenance: int | None = None, at_ms: int | None = None
    ) -> Callable[..., Any]:
        """Dramatiq's ``do_<command>``: its dispatch script with the same arguments, sent by
        a :class:`ScriptSender` instead of redis-py's ``execute_command`` and pool hand-out
        (the same errors: Redis unreachable, a failing script; a forgotten script is
        loaded and sent again). ``maintenance`` (1 or 0) overrides Dramatiq's draw of
        whether this call also does its maintenance (a caller that drew it already);
        ``at_ms`` the time it is given (None: this host's clock)."""
        script = self.scripts["dispatch"]

        def do_dispatch(queue_name: str, *args: Any) -> Any:
            call = [
                command,
                current_millis() if at_ms is None else at_ms,
                queue_name,
                self.broker_id,
                self.heartbeat_timeout,
                self.dead_message_ttl,
                self._should_do_maintenance(command) if maintenance is None else maintenance,
                self._max_unpack_size(),  # type: ignore[no-untyped-call]
                *args,
            ]
            return self._dispatches.send(script, self.namespace, [call])[0]

        return do_dispatch

    @property
    def consumer_class(self) -> type[TierConsumer]:
        return TierConsumer

    def _should_do_maintenance(self, command: str) -> int:
        """Never by chance: a dead worker's messages come back on a schedule
        (``tiers.dead_workers``), not at a random draw of some later fetch."""
        return 0

    def fetch_messages(self, queue_name: str, count: int) -> list[Message[Any]]:
        """Dramatiq's fetch, claimed in the same round trip (``fetch_claim.lua``: grouped jobs
        take their slots), screened and decoded (once: the consumer hands out these objects).
        A message no worker can run (undecodable, unknown actor, no job id, or carrying
        another redis id than the one it was queued under) is dead-lettered, under the id it
        was fetched under, and its job failed here, so it neither stops the consumer nor
        comes back; one the script could not claim is claimed when its run starts."""
        limit = min(count, self._max_unpack_size())  # type: ignore[no-untyped-call]
        fetched, verdicts, left, fetched_ids, sent = self.jobs.fetch_and_claim(
            queue_name, self.broker_id, limit, list(self.actors)
        )
        self.left_in_queue[queue_name] = left
        if not fetched:
            return []
        screened, rejected = screen_fetch(fetched, fetched_ids, self.actors)
        self._held[queue_name].update(m.options[REDIS_MESSAGE_ID] for _, m in screened)
        if rejected:
            dead_letter(self.jobs, self.broker_id, queue_name, rejected)
        decoded = [message for _, message in screened]
        parked = self.jobs.keep_fetch_verdicts(
            ((message, verdicts[at]) for at, message in screened if verdicts[at]), sent
        )
        if parked:
            decoded = self._drop_parked(queue_name, decoded, parked)
        fault_point("fetch.after")
        return decoded

    def _drop_parked(
        self, queue_name: str, decoded: list[Message[Any]], parked: list[Message[Any]]
    ) -> list[Message[Any]]:
        """The fetched messages without those the claim parked (acked and waiting in their
        group: no thread runs them, and no ack or hand-back of this delivery may follow)."""
        gone = {message.options[REDIS_MESSAGE_ID] for message in parked}
        self.release_held(queue_name, gone)
        for message in parked:
            GROUP_PARKED.labels(message.actor_name, tier_of_queue(queue_name)).inc()
            log.info("job %s not run: parked", message.options[JOB_ID])
        return [m for m in decoded if m.options[REDIS_MESSAGE_ID] not in gone]

    # -- what this process holds ---------------------------------------------------------

    def release_held(self, queue_name: str, redis_ids: Iterable[str]) -> None:
        """These messages are no longer this process's (acked, nacked or handed back)."""
        held = self._held[queue_name]
        for redis_id in redis_ids:
            held.discard(redis_id)

    def keep_leftovers(self, queue_name: str, messages: Iterable[Message[Any]]) -> None:
        """Prefetched messages a consumer could not hand back; the next one serves them."""
        self._leftovers[queue_name].extend(messages)

    def take_leftovers(self, queue_name: str) -> list[Message[Any]]:
        leftovers, self._leftovers[queue_name] = self._leftovers[queue_name], []
        return leftovers

    def maintain(self, queue_name: str, at_ms: int | None = None) -> None:
        """Dramatiq's maintenance for ``queue_name`` (dead workers' messages of the queue back
        to it, expired dead letters dropped) and nothing else: its dispatch script's
        ``requeue`` of no message, with the maintenance drawn. ``at_ms``: the time by which
        workers are judged dead (Redis's, from ``tiers.dead_workers``; None: this host's)."""
        self._dispatch("requeue", maintenance=1, at_ms=at_ms)(queue_name)

    def wake_event(self, queue_name: str) -> threading.Event:
        """The event that cuts short an idle consumer's wait on ``queue_name`` (the same one
        for every consumer of the queue this process starts)."""
        return self._wakes[queue_name]

    def wake(self, queue_name: str) -> None:
        """Something was pushed to ``queue_name`` (a settle passed its freed group slot to a
        parked message): its consumer here fetches now instead of sleeping out its backoff."""
        self._wakes[queue_name].set()

    def recover_unheld(self, queue_name: str) -> int:
        """Hand back to ``queue_name`` the messages Redis lists as this worker's but this
        process does not hold: the reply of a fetch lost to a connection error left them
        there, where nothing would ever run them while this worker lives. Returns how many."""
        acks = f"{self.namespace}:__acks__.{self.broker_id}.{queue_name}"
        listed = {as_text(i) for i in self.client.smembers(acks)}
        lost = sorted(listed - set(self._held[queue_name]))
        if lost:
            self._dispatch("requeue")(queue_name, *lost)
            log.warning("handed back %d message(s) of %s lost in transit", len(lost), queue_name)
        return len(lost)

    @staticmethod
    def prepare(message: Message[Any], delay: int | None = None) -> Message[Any]:
        """Give the message its per-enqueue Redis id (and an eta when delayed)."""
        prepared = message.copy(options={REDIS_MESSAGE_ID: str(uuid4())})
        if delay is not None:
            prepared = prepared.copy(
                queue_name=dq_name(prepared.queue_name),
                options={ETA: current_millis() + delay},
            )
        return prepared

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        """Enqueue one message that carries a job id (``st_job``). A message without one is
        refused: outcomes, retries and dead-lettering all hang on the job record, so a bare
        ``actor.send`` would run once and vanish on failure."""
        if not message.options.get(JOB_ID):
            raise ValueError(
                f"message for {message.actor_name!r} has no job id: enqueue it through "
                "router.Router, which gives it one"
            )
        previous = message.options.get(REDIS_MESSAGE_ID, "")
        prepared = self.prepare(message, delay)
        self.emit_before("enqueue", prepared, delay)
        self.jobs.enqueue_many([prepared], previous_redis_id=previous)
        self.emit_after("enqueue", prepared, delay)
        return prepared

    def enqueue_identified(
        self, messages: Sequence[Message[Any]], guard: WindowGuard | None = None
    ) -> list[EnqueueResult]:
        """Enqueue messages carrying job ids, built for this call (``Router.message_for``), in
        one round trip; report each one's outcome. A new message's first copy takes its
        message id as its Redis id (unique as well: a later copy of it, a retry or a move,
        gets a fresh one), set in place: no copy and no second uuid per enqueue. With
        ``guard`` (a window on this broker's Redis) nothing is enqueued, and
        ``shared.errors.WindowFull`` raised, when its window is full."""
        prepared = list(messages)
        for message in prepared:
            message.options[REDIS_MESSAGE_ID] = message.message_id
        hooked = self._hooks_enqueue()
        if hooked:
            for message in prepared:
                self.emit_before("enqueue", message, None)
        results = self.jobs.enqueue_many(prepared, guard=guard)
        if hooked:
            for message in prepared:
                self.emit_after("enqueue", message, None)
        return results

    def _hooks_enqueue(self) -> bool:
        """Whether a middleware of the stack has an enqueue hook: the stack's own have none,
        and calling every middleware's no-op hook twice cost an enqueue more than packing
        it."""
        stack = self.middleware
        return bool(
            self._hooks.hooking(stack, "before_enqueue")
            or self._hooks.hooking(stack, "after_enqueue")
        )

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        """Dramatiq's ``emit_before``, calling only the middleware that hook ``signal``.

        A signal with one argument (a message, for every signal of a run) calls each hook
        with it as it stands rather than unpacking ``*args``: a call through ``*args`` and
        ``**kwargs`` costs the interpreter several times a plain one, and a run's signals call
        about twenty hooks."""
        signal = "before_" + signal
        hooked = self._hooks.hooking(self.middleware, signal)
        if kwargs or len(args) != 1:
            self._emit(signal, hooked, args, kwargs)
            return
        (argument,) = args
        for middleware in hooked:
            try:
                getattr(middleware, signal)(self, argument)
            except MiddlewareError:
                raise
            except Exception:
                self._hook_failed(signal, middleware)

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        """Dramatiq's ``emit_after`` (the stack in reverse), calling only the middleware that
        hook ``signal``; one argument, or one and a ``result`` (a run that returned), are
        passed as they stand, as :meth:`emit_before` passes one."""
        signal = "after_" + signal
        hooked = self._hooks.hooking(self.middleware, signal)[::-1]
        if len(args) != 1 or (kwargs and kwargs.keys() != {"result"}):
            self._emit(signal, hooked, args, kwargs, reraise=False)
            return
        (argument,) = args
        if not kwargs:
            for middleware in hooked:
                try:
                    getattr(middleware, signal)(self, argument)
                except Exception:
                    self._hook_failed(signal, middleware)
            return
        result = kwargs["result"]
        for middleware in hooked:
            try:
                getattr(middleware, signal)(self, argument, result=result)
            except Exception:
                self._hook_failed(signal, middleware)

    def _emit(
        self,
        signal: str,
        hooked: Sequence[Middleware],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        reraise: bool = True,
    ) -> None:
        """Call ``signal`` on each of ``hooked`` with any arguments (Dramatiq's loop)."""
        for middleware in hooked:
            try:
                getattr(middleware, signal)(self, *args, **kwargs)
            except MiddlewareError:
                if reraise:
                    raise
                self._hook_failed(signal, middleware)
            except Exception:
                self._hook_failed(signal, middleware)

    def _hook_failed(self, signal: str, middleware: Middleware) -> None:
        self.logger.critical("Unexpected failure in %s of %r.", signal, middleware, exc_info=True)

    def queue_depths(self, queue_names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``queue -> (ready, delayed)`` message counts."""
        pipe = self.client.pipeline(transaction=False)
        for name in queue_names:
            count_ready(pipe, self.namespace, name)
            pipe.hlen(f"{self.namespace}:{dq_name(name)}.msgs")
        replies = iter(pipe.execute())
        return {name: (ready_from(replies), int(next(replies))) for name in queue_names}

    def queue_failures(self, queue_names: Sequence[str]) -> dict[str, int]:
        """``queue -> failed`` messages in each queue's dead-letter set (kept by Dramatiq for
        its dead-message TTL)."""
        pipe = self.client.pipeline(transaction=False)
        for name in queue_names:
            pipe.zcard(f"{self.namespace}:{xq_name(name)}")
        return {name: int(count) for name, count in zip(queue_names, pipe.execute(), strict=True)}
