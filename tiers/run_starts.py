"""The start of each claimed run (``start.lua``): the check that its delivery is still this
worker's, the count of runs that died, and the run's fencing token; waited for, or sent
ahead of the run's settle (``tiers.middleware.deliveries`` decides which)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import uuid4

from dramatiq.message import Message
from redis.commands.core import Script

from tiers.fetch_claims import QUEUED_LEASE_MS
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_values import as_text, now_ms
from tiers.script_batch import ScriptBatch, ScriptQueue


class RunStarts:
    """The job store's run starts (:class:`tiers.job_store.JobStore` sets these attributes
    up)."""

    _scripts: Mapping[str, Script]
    #: Waited-for calls of every thread, sharing round trips.
    _batch: ScriptBatch
    #: The settle sender: calls nobody waits for, in the order they were submitted.
    _settles: ScriptQueue

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

    def start_later(
        self,
        message: Message[Any],
        main_queue: str,
        worker_id: str,
        *,
        max_unsettled: int,
        retention_seconds: float,
        start_id: str,
        then: Callable[[tuple[str, str] | None, Exception | None], None],
    ) -> None:
        """:meth:`start`, sent by the settle sender ahead of the run's settle (one
        connection, calls in order: Redis applies the start first) while the run goes on;
        ``then((verdict, token), None)`` or ``then(None, error)`` runs in the sender's thread
        once Redis answered. The run is counted as started alone: a death of an earlier run
        of the job (which the fetch did not see) is counted, and the run goes on. A run that
        kills its process before the sender sent the start is not counted as a death; its
        job's next delivery (found ``active`` by the fetch) waits for its start."""
        args = self.start_args(
            message, main_queue, worker_id, max_unsettled, retention_seconds, True, start_id
        )

        def answered(reply: Any, error: Exception | None) -> None:
            then(None if error else (as_text(reply[0]), as_text(reply[1])), error)

        self._settles.submit("start", args, answered)

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
