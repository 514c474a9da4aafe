"""Job identity in Redis: the job record, group slots and leases, through atomic scripts.

Every change that must not be split by a crash (register an id and push its message; finish
a run and hand its slot on) is one Lua script, so Redis applies it whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import redis
from dramatiq.message import Message

from shared.errors import WindowFull
from tiers.beat_log import BeatLog
from tiers.fetch_claims import QUEUED_LEASE_MS as QUEUED_LEASE_MS
from tiers.fetch_claims import FetchClaims
from tiers.lua_scripts import load_script
from tiers.message_encoding import encode_message
from tiers.options import (
    ETA,
    GROUP,
    GROUP_CAP,
    JOB_ID,
    KEEP_FINISHED,
    ORGANIZATION,
    REDIS_MESSAGE_ID,
)
from tiers.rate_window import WindowGuard
from tiers.redis_values import as_text as as_text
from tiers.redis_values import now_ms as now_ms
from tiers.run_starts import RunStarts
from tiers.script_batch import ScriptBatch, ScriptQueue
from tiers.script_send import ScriptSender

if TYPE_CHECKING:
    from tiers.run_rates import RunCount

LIVE_STATES = frozenset({"waiting", "parked", "delayed", "active"})
FINISHED_STATES = frozenset({"completed", "failed", "record_missing", "skipped"})


@dataclass(frozen=True)
class EnqueueResult:
    """What the queue did with one request: ``added``, ``replaced`` or ``deduplicated``."""

    job_id: str
    outcome: str
    message_id: str
    queue: str


class JobStore(FetchClaims, RunStarts):
    """Job records, group slots and leases for one Redis namespace.

    Parameters:
      client: a Redis client (decode_responses off, like Dramatiq's).
      namespace: the key prefix shared with the Dramatiq broker.
      lease_seconds: how long a running job's group slot survives without a refresh.
    """

    def __init__(self, client: redis.Redis, namespace: str, lease_seconds: float = 30.0) -> None:
        self.client = client
        self.namespace = namespace
        self.lease_ms = int(lease_seconds * 1000)
        # The fetch-time claims' verdicts and slots (tiers.fetch_claims.FetchClaims).
        self.claimed_at_fetch = {}
        self.slots_at_fetch = {}
        self.fetched_at = {}
        self.beats = BeatLog(60_000)
        self._scripts = {
            name: client.register_script(load_script(name))
            for name in (
                "enqueue",
                "claim",
                "start",
                "fetch_claim",
                "unclaim",
                "settle",
                "reap",
                "promote",
                "reject",
            )
        }
        #: A worker's claims (and synchronous settles), from all its threads, share round
        #: trips; settles nobody waits for go with the settle sender's.
        self._batch = ScriptBatch(client, namespace, self._scripts)
        self._settles = ScriptQueue(client, namespace, self._scripts, name="settle-sender")
        #: Enqueues go on a connection of their own (``tiers.script_send``), and so do the
        #: claims and hand-backs of fetched batches.
        self._sender = ScriptSender(client)
        self._fetches = ScriptSender(client)

    def close(self) -> None:
        """Close the connections enqueues, claims and settles keep (the next call opens
        another)."""
        for sender in (self._sender, self._fetches, self._batch, self._settles):
            sender.close()

    def record_key(self, job_id: str) -> str:
        return f"{self.namespace}:job:{job_id}"

    # -- enqueue -----------------------------------------------------------------------------

    def _enqueue_args(
        self, message: Message[Any], now: int, previous_redis_id: str = ""
    ) -> list[Any]:
        options = message.options
        return [
            options[JOB_ID],
            message.message_id,
            options[REDIS_MESSAGE_ID],
            encode_message(message),
            message.queue_name,
            options.get(GROUP, ""),
            options.get(GROUP_CAP, 0),
            now,
            "1" if options.get(KEEP_FINISHED) else "0",
            options.get(ORGANIZATION, ""),
            message.actor_name,
            QUEUED_LEASE_MS,
            previous_redis_id,
        ]

    def enqueue_many(
        self,
        messages: Sequence[Message[Any]],
        previous_redis_id: str = "",
        guard: WindowGuard | None = None,
    ) -> list[EnqueueResult]:
        """Register and push each message in one round trip (``tiers.script_send``: no
        ``SCRIPT EXISTS`` first; a script Redis forgot is loaded and the refused calls sent
        again).

        Each message is handled by its own atomic script call, and a batch of several is one
        transaction (``MULTI``/``EXEC``): Redis takes all of them or none (a Redis out of
        memory refuses the whole batch, never a part). ``previous_redis_id`` names the copy
        a single message replaces when it moves along (its id stays the same). ``guard``, a
        window on this Redis, is checked by every call of the round trip before it does
        anything: all of them see the same counter, so all go ahead or none does.

        Raises:
          WindowFull: ``guard``'s window is full; nothing was enqueued.
          tiers.script_send.OutcomeUnknown: sent, and Redis did not answer: all of the
            batch or none of it may be enqueued.
          redis.ConnectionError / redis.TimeoutError: Redis could not be reached; nothing
            was sent.
          redis.exceptions.OutOfMemoryError: Redis is full; nothing was enqueued.
        """
        now = now_ms()
        calls = [self._enqueue_args(message, now, previous_redis_id) for message in messages]
        if guard is not None:
            guarded = guard.script_args()
            for args in calls:
                args += guarded
        replies = self._sender.send(
            self._scripts["enqueue"], self.namespace, calls, atomic=len(calls) > 1
        )
        if replies and replies[0][0] == b"guarded":
            raise WindowFull(int(replies[0][1]) / 1000.0)
        return [
            EnqueueResult(
                job_id=message.options[JOB_ID],
                outcome=reply[0].decode(),
                message_id=reply[1].decode(),
                queue=message.queue_name,
            )
            for message, reply in zip(messages, replies, strict=True)
        ]

    # -- worker side -------------------------------------------------------------------------

    def claim(self, message: Message[Any], main_queue: str, worker_id: str) -> str:
        """Before a run of a message ``worker_id`` fetched from ``main_queue``: ``run``,
        ``stale`` (replaced or superseded copy), ``done`` (already finished) or ``parked``
        (group full; the message now waits in its group, and its delivery is no longer the
        worker's to ack: the ack that follows is a no-op)."""
        options = message.options
        parked_form = message.copy(queue_name=main_queue)
        parked_form.options.pop(ETA, None)
        reply = self._batch.call(
            "claim",
            [
                options[JOB_ID],
                message.message_id,
                options[REDIS_MESSAGE_ID],
                options.get(GROUP, ""),
                options.get(GROUP_CAP, 0),
                now_ms(),
                self.lease_ms,
                parked_form.encode(),
                main_queue,
                worker_id,
            ],
        )
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def epochs(self, job_ids: Sequence[str]) -> list[tuple[str | None, str | None]]:
        """The epoch of each job's latest started run and the id of its start not settled
        yet (None: no record, none started, or none open)."""
        if not job_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(self.record_key(job_id), "epoch", "open")
        return [
            (
                None if epoch is None else as_text(epoch),
                None if open_start is None else as_text(open_start),
            )
            for epoch, open_start in pipe.execute()
        ]

    def settle(self, message: Message[Any], **outcome: Any) -> str:
        """After a run, record its end (see :meth:`settle_args` for ``outcome``) and return
        the script's verdict: ``ok``; ``released`` when the freed group slot went to a
        parked message, now in the queue; or ``stale`` when the record points at another
        message (its slot and state are left alone)."""
        return as_text(self._batch.call("settle", self.settle_args(message, **outcome)))

    def settle_later(
        self, args: Sequence[Any], then: Callable[[str | None, Exception | None], None]
    ) -> None:
        """Settle with ``args`` (:meth:`settle_args`) in a round trip of the settle sender;
        ``then(verdict, None)`` or ``then(None, error)`` runs in its thread once Redis has
        answered (it is retried while Redis is unreachable)."""

        def answered(reply: Any, error: Exception | None) -> None:
            then(None if error else as_text(reply), error)

        self._settles.submit("settle", args, answered)

    def report_settles(self, on_round_trip: Callable[[int, float, int], None]) -> None:
        """Hand each round trip of the settle sender to ``on_round_trip`` (its calls, its
        seconds, the calls still unanswered: ``tiers.settle_metrics``)."""
        self._settles.on_round_trip = on_round_trip

    @property
    def settles_unanswered(self) -> int:
        """Starts and settles on the settle sender not answered yet."""
        return self._settles.unanswered

    def flush_settles(self, timeout: float) -> bool:
        """Wait until every settle handed to :meth:`settle_later` is answered; False when
        ``timeout`` seconds passed first."""
        return self._settles.flush(timeout)

    def settle_args(
        self,
        message: Message[Any],
        *,
        state: str,
        retention_seconds: float,
        error: str = "",
        failures: int = 0,
        next_message: Message[Any] | None = None,
        delay: str = "",
        ack: tuple[str, str] | None = None,
        count: RunCount | None = None,
        epoch: str = "",
    ) -> list[Any]:
        """The settle script's arguments for the end of a run: record it and free its slot;
        with ``next_message`` the job goes back to the broker (retry or delay) in the same
        atomic step. ``delay`` says why a delayed job waits (kept as ``last_delay``; a delay
        is not an error). With ``ack=(queue, worker id)`` the delivered message is
        acknowledged to Dramatiq in the same step (the consumer then skips its own ack);
        with ``count`` the run is counted in the rates (``tiers.run_rates``) in that step
        too. ``epoch`` is the run's fencing token (:meth:`start`): a settle carrying an
        older one than the record's is refused (``stale``)."""
        options = message.options
        counted: tuple[str | int, ...] = (
            (count.key, count.keep_seconds, *count.fields) if count else ()
        )
        return [
            options[JOB_ID],
            options[REDIS_MESSAGE_ID],
            options.get(GROUP, ""),
            state,
            now_ms(),
            int(retention_seconds * 1000),
            error[:2000],
            failures,
            next_message.options[REDIS_MESSAGE_ID] if next_message else "",
            next_message.encode() if next_message else "",
            next_message.queue_name if next_message else "",
            QUEUED_LEASE_MS,
            delay[:500],
            *(ack or ("", "")),
            *(counted[:2] or ("", 0)),
            epoch,
            *counted[2:],
        ]

    def promote(
        self, delayed: Sequence[tuple[Message[Any], str]], worker_id: str
    ) -> list[str | redis.ResponseError]:
        """Move due delayed messages, each to its queue (its group's slot or parked list),
        and ack their delay-queue copies, each message in one step and all of them in one
        round trip (a window's reserved starts fall due together). Per message: ``moved``,
        ``gone`` (this worker no longer holds it), ``stale`` (superseded), ``done`` (its job
        has finished), or the error its script answered (Redis full: nothing of it done).

        Raises:
          redis.ConnectionError / redis.TimeoutError: Redis could not be reached, or did
            not answer once the calls were sent (``OutcomeUnknown``: moved or not, a message
            is then ``gone`` when promoted again).
        """
        now = now_ms()
        calls = []
        for message, queue in delayed:
            options = message.options
            moved = message.copy(queue_name=queue, options={REDIS_MESSAGE_ID: str(uuid4())})
            moved.options.pop(ETA, None)
            calls.append(
                [
                    message.queue_name,
                    worker_id,
                    now,
                    options[JOB_ID],
                    message.message_id,
                    options[REDIS_MESSAGE_ID],
                    moved.options[REDIS_MESSAGE_ID],
                    moved.encode(),
                    queue,
                    options.get(GROUP, ""),
                    options.get(GROUP_CAP, 0),
                    QUEUED_LEASE_MS,
                ]
            )
        replies: list[Any] = [None] * len(calls)
        script = self._scripts["promote"]
        self._fetches.send_each(
            self.namespace, [(script, args) for args in calls], replies.__setitem__
        )
        return [r if isinstance(r, redis.ResponseError) else as_text(r) for r in replies]

    def reject(
        self,
        queue: str,
        worker_id: str,
        rejected: Sequence[tuple[str, str, str]],
        retention_seconds: float = 86_400.0,
    ) -> int:
        """Dead-letter fetched messages ``(redis id, job id or "", reason)`` that cannot run
        and fail their jobs, in one step."""
        args: list[Any] = [queue, worker_id, now_ms(), int(retention_seconds * 1000)]
        for redis_id, job_id, reason in rejected:
            args += [redis_id, job_id, reason[:2000]]
        return int(self._scripts["reject"](keys=[self.namespace], args=args))

    def refresh_leases(self, held: Iterable[tuple[str, str]]) -> None:
        """Push the lease deadline of running jobs ``(group key, job id)`` forward."""
        held = list(held)
        if not held:
            return
        deadline = now_ms() + self.lease_ms
        pipe = self.client.pipeline(transaction=False)
        for group_key, job_id in held:
            pipe.zadd(f"{self.namespace}:group:{group_key}", {job_id: deadline}, xx=True)
        pipe.execute()

    def reap(self, max_groups: int = 200) -> int:
        """Hand slots whose lease ran out, by Redis's clock, to parked messages; returns how
        many were reaped."""
        reply = self._scripts["reap"](keys=[self.namespace], args=[max_groups, QUEUED_LEASE_MS])
        return int(reply)

    # -- inspection --------------------------------------------------------------------------

    def record(self, job_id: str) -> dict[str, str] | None:
        """The job record as strings, or None when unknown or expired."""
        raw = self.client.hgetall(self.record_key(job_id))
        if not raw:
            return None
        return {as_text(k): as_text(v) for k, v in raw.items()}

    def group_state(self, group_key: str) -> tuple[int, int]:
        """``(admitted, parked)`` counts of one group."""
        base = f"{self.namespace}:group:{group_key}"
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(base)
        pipe.llen(f"{base}:parked")
        admitted, parked = pipe.execute()
        return int(admitted), int(parked)
