"""The start of each claimed run (``start.lua``): the check that its delivery is still this
worker's, the count of runs that died, and the run's fencing token; waited for, or written
before the run and answered after it (``tiers.start_wire``; ``tiers.middleware.deliveries``
decides which)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from dramatiq.message import Message
from redis.commands.core import Script

from tiers.fetch_claims import QUEUED_LEASE_MS
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_retry import REDIS_DOWN
from tiers.redis_values import as_text, now_ms
from tiers.script_batch import ScriptBatch
from tiers.start_wire import StartWire


class RunStarts:
    """The job store's run starts (:class:`tiers.job_store.JobStore` sets these attributes
    up)."""

    _scripts: Mapping[str, Script]
    #: Waited-for calls of every thread, sharing round trips.
    _batch: ScriptBatch
    #: Each worker thread's start, written before its run and answered after it.
    _starts: StartWire
    namespace: str

    def start(
        self,
        message: Message[Any],
        main_queue: str,
        worker_id: str,
        *,
        max_unsettled: int,
        retention_seconds: float,
        alone: bool = False,
        start_id: str = "",
    ) -> tuple[str, str]:
        """Just before a claimed run of a message ``worker_id`` fetched from ``main_queue``
        (start.lua): ``("run", epoch)``, the run's fencing token for its settle;
        ``("lost", _)`` when the delivery is no longer this worker's; ``stale`` or ``done``
        as :meth:`claim`; ``("worker_died", count)`` when ``max_unsettled`` runs of the job
        ended without a settle: the job is failed and the message dead-lettered;
        ``("suspect", count)`` when an earlier run died and the worker does not run it
        ``alone`` (nothing else running): not started. ``start_id`` names this start: the
        same call sent again (its reply lost) answers as the first did, and counts nothing
        (a fresh one when empty)."""
        args = self.start_args(
            message, main_queue, worker_id, max_unsettled, retention_seconds, alone, start_id
        )
        reply = self._batch.call("start", args)
        return as_text(reply[0]), as_text(reply[1])

    def write_start(
        self,
        message: Message[Any],
        main_queue: str,
        worker_id: str,
        *,
        max_unsettled: int,
        retention_seconds: float,
        start_id: str,
    ) -> bool:
        """Write :meth:`start`'s call on this thread's connection, not waiting for the answer
        (:meth:`read_start` reads it, after the run); the run is counted as started alone
        (the death of an earlier run of the job, which the fetch did not see, is counted and
        the run goes on). False when it could not be written: start the run with
        :meth:`start`."""
        args = self.start_args(
            message, main_queue, worker_id, max_unsettled, retention_seconds, True, start_id
        )
        return self._starts.write(self._scripts["start"], self.namespace, args)

    def read_start(self) -> tuple[str, str] | None:
        """The answer to this thread's :meth:`write_start`: ``(verdict, token)`` as
        :meth:`start`'s, or None when there is none to trust (Redis did not answer, or
        refused the call: ask again with :meth:`start` and the same start id)."""
        try:
            reply = self._starts.read()
        except REDIS_DOWN:
            return None
        if isinstance(reply, Exception):
            return None
        return as_text(reply[0]), as_text(reply[1])

    def start_args(
        self,
        message: Message[Any],
        main_queue: str,
        worker_id: str,
        max_unsettled: int,
        retention_seconds: float,
        alone: bool,
        start_id: str,
    ) -> list[Any]:
        """start.lua's arguments for a run of ``message``."""
        options = message.options
        return [
            options[JOB_ID],
            message.message_id,
            options[REDIS_MESSAGE_ID],
            main_queue,
            worker_id,
            now_ms(),
            max_unsettled,
            int(retention_seconds * 1000),
            QUEUED_LEASE_MS,
            "1" if alone else "0",
            start_id or str(uuid4()),
        ]
