"""Claims made when a worker fetches a batch (its jobs marked started, grouped ones given
their slots), and what the worker keeps of them until a thread starts each message.

A fetched main-queue batch is claimed in the fetch's own round trip (``fetch_claim.lua``).
Each verdict waits here for the worker thread that picks the message up; a message handed
back unrun has its claim undone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from dramatiq.message import Message
from redis.commands.core import Script

from tiers.beat_log import BeatLog
from tiers.options import GROUP, JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_values import as_text, now_ms
from tiers.script_send import ScriptSender

#: A queued (not yet started) message holds its group slot this long before the reaper may
#: hand it on; the start-time claim re-checks the cap, so a reaped slot never over-admits.
QUEUED_LEASE_MS = 3_600_000


class Fetched(NamedTuple):
    """What one fetch (``fetch_claim.lua``) answered."""

    data: list[bytes | None]
    verdicts: list[str]
    left: int
    ids: list[str]
    #: When the call was sent (``time.monotonic()``).
    sent: float


class FetchClaims:
    """The job store's fetch-time claims (:class:`tiers.job_store.JobStore` sets these
    attributes up)."""

    namespace: str
    lease_ms: int
    _scripts: Mapping[str, Script]
    #: The connection the claims of fetched batches (and their hand-backs) go on.
    _fetches: ScriptSender
    #: redis message id -> verdict of the claim made when the message was fetched; the
    #: worker thread that picks the message up takes it (:meth:`take_fetch_claim`).
    claimed_at_fetch: dict[str, str]
    #: redis message id -> when the fetch that claimed it (``run``, no earlier run that died)
    #: was sent (``time.monotonic()``): its run may start without waiting for ``start.lua``
    #: while this worker's heartbeats are unbroken since then (:attr:`beats`).
    fetched_at: dict[str, float]
    #: This worker's heartbeats that reached Redis (the fetches' among them).
    beats: BeatLog
    #: redis message id -> (group key, job id) of the fetched messages whose claim took a
    #: group slot and that no thread has started yet: their leases are kept fresh like
    #: those of running jobs (``GroupSlots``), so a slot outlives a long prefetch wait but
    #: not this worker.
    slots_at_fetch: dict[str, tuple[str, str]]

    def fetch_and_claim(
        self, queue: str, worker_id: str, count: int, actors: Sequence[str]
    ) -> Fetched:
        """Fetch up to ``count`` messages of main queue ``queue`` for worker ``worker_id``
        and claim those it can run (``actors``: its actor names) in one round trip
        (fetch_claim.lua). Returns the fetched data and a verdict per message (``run``,
        ``stale``, ``done``, ``parked``, ``later``: the queued copy of a message to park could
        not be read, claimed when a thread starts it), or "" for a message the script did
        not claim (the worker
        screens it, and claims it at start if it runs it), and how many messages the queue
        still holds, and the redis id each message was fetched under, and when the fetch was
        sent (it wrote this worker's heartbeat, :attr:`beats`); hand the claimed
        messages, once decoded, to :meth:`keep_fetch_verdicts`. A delay queue's messages
        are fetched the same way, never claimed."""
        call = [now_ms(), self.lease_ms, queue, worker_id, count, *actors]
        sent = time.monotonic()
        [(fetched, verdicts, left, ids)] = self._fetches.send(
            self._scripts["fetch_claim"], self.namespace, [call]
        )
        self.beats.beat(sent)
        return Fetched(
            list(fetched),
            [as_text(verdict) for verdict in verdicts],
            int(left),
            [as_text(redis_id) for redis_id in ids],
            sent,
        )

    def keep_fetch_verdicts(
        self, claimed: Iterable[tuple[Message[Any], str]], sent: float | None = None
    ) -> list[Message[Any]]:
        """Keep the fetch-time verdicts of fetched messages for their worker threads (and the
        slots of grouped ones for this worker's lease upkeep; and, for a ``run`` of a job
        with no earlier run that died, when the fetch was ``sent``); returns the parked
        ones."""
        parked: list[Message[Any]] = []
        for message, verdict in claimed:
            options = message.options
            if verdict == "parked":
                parked.append(message)
            elif verdict != "later":
                redis_id = options[REDIS_MESSAGE_ID]
                if verdict == "run" and sent is not None:
                    self.fetched_at[redis_id] = sent
                if verdict == "rerun":
                    verdict = "run"
                if verdict == "run" and options.get(GROUP):
                    self.slots_at_fetch[redis_id] = (options[GROUP], options[JOB_ID])
                self.claimed_at_fetch[redis_id] = verdict
        return parked

    def take_fetched_at(self, redis_id: str) -> float | None:
        """When the fetch of a message claimed ``run`` was sent (None: not known, or its job
        has an earlier run that died), forgotten here."""
        return self.fetched_at.pop(redis_id, None)

    def take_fetch_claim(self, redis_id: str) -> str | None:
        """The verdict of the fetch-time claim of a message (None: not claimed at fetch),
        forgotten here: the message is started, acked or handed back."""
        self.slots_at_fetch.pop(redis_id, None)
        self.fetched_at.pop(redis_id, None)
        return self.claimed_at_fetch.pop(redis_id, None)

    def fetched_slots(self) -> list[tuple[str, str]]:
        """(group key, job id) of the fetched, not yet started jobs holding a group slot."""
        return list(self.slots_at_fetch.copy().values())

    def unclaim_unstarted(self, messages: Iterable[Message[Any]]) -> None:
        """Messages handed back unrun (worker shutdown): drop their fetch-time verdicts and
        set the jobs claimed at fetch back to ``waiting`` (a grouped one keeps its slot, now
        leased as a queued job's)."""
        args: list[Any] = [now_ms(), QUEUED_LEASE_MS]
        for message in messages:
            options = message.options
            if self.take_fetch_claim(options.get(REDIS_MESSAGE_ID, "")) == "run":
                args += [options[JOB_ID], options[REDIS_MESSAGE_ID], options.get(GROUP, "")]
        if len(args) > 2:
            self._fetches.send(self._scripts["unclaim"], self.namespace, [args])
