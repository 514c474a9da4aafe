"""Failed jobs and their dead-lettered messages: list them, retry or discard one.

A job that fails for good keeps its record (state ``failed``, for its family's retention) and
Dramatiq keeps its last message in the queue's dead-letter set (``<queue>.XQ``, seven days).
An operator's retry or discard is one script over both, keyed by the record's current
message, so it cannot act on a job that moved on meanwhile:

==========  ===========================================  ===================================
action      what changes, in one step                    answers when it cannot
==========  ===========================================  ===================================
retry       dead letter removed; a new message (new      ``not_failed``: the job is no
            message id, attempts spent reset) placed     longer failed (re-enqueued,
            like an enqueue: its queue, or parked when   expired); ``changed``: it failed
            its group is full; record live again, with   again since the page was drawn;
            ``retried_by`` / ``retried_at``              ``gone``: no dead letter to retry
discard     dead letter removed; record stays ``failed`` the same
            with ``discarded_by`` / ``discarded_at``
==========  ===========================================  ===================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from dramatiq.common import q_name, xq_name
from dramatiq.message import Message

from tiers.job_store import QUEUED_LEASE_MS, JobStore, as_text, now_ms
from tiers.lua_scripts import load_script
from tiers.options import (
    ETA,
    FAILURES,
    GROUP,
    GROUP_CAP,
    JOB_ID,
    REDIS_MESSAGE_ID,
    WINDOW_ADMITTED,
    WINDOW_RESERVATION,
)


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message and what its job's record says now.

    Attributes:
      queue: the queue it failed in.
      redis_id: its id in the broker.
      job_id: its job id ("" when the message carried none, or could not be decoded).
      failed_at_ms: when it was dead-lettered.
      record: the job's record, or None when it expired.
    """

    queue: str
    redis_id: str
    job_id: str
    failed_at_ms: int
    record: dict[str, str] | None

    @property
    def actionable(self) -> bool:
        """Whether retry and discard apply: the record is failed on this very message."""
        record = self.record or {}
        return record.get("state") == "failed" and record.get("cur") == self.redis_id


class DeadLetters:
    """Failed jobs of one namespace, through the job store's client.

    Parameters:
      jobs: the broker's job store.
    """

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self.client = jobs.client
        self.namespace = jobs.namespace
        self._revive = self.client.register_script(load_script("revive"))
        self._discard = self.client.register_script(load_script("discard"))

    def xq_key(self, queue: str) -> str:
        return f"{self.namespace}:{xq_name(q_name(queue))}"

    def counts(self, queues: list[str]) -> dict[str, int]:
        """``queue -> dead-lettered messages``."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcard(self.xq_key(queue))
        return {queue: int(n) for queue, n in zip(queues, pipe.execute(), strict=True)}

    def latest(self, queues: list[str], limit: int = 50) -> list[DeadLetter]:
        """The ``limit`` most recently dead-lettered messages across ``queues``, newest first."""
        found: list[tuple[str, str, int]] = []
        for queue in queues:
            entries: Any = self.client.zrevrange(self.xq_key(queue), 0, limit - 1, withscores=True)
            found += [(queue, as_text(member), int(score)) for member, score in entries]
        found.sort(key=lambda entry: entry[2], reverse=True)
        found = found[:limit]
        letters = []
        for queue, redis_id, failed_at in found:
            job_id = self._job_id(queue, redis_id)
            record = self.jobs.record(job_id) if job_id else None
            letters.append(DeadLetter(queue, redis_id, job_id, failed_at, record))
        return letters

    def _job_id(self, queue: str, redis_id: str) -> str:
        data: Any = self.client.hget(f"{self.xq_key(queue)}.msgs", redis_id)
        if data is None:
            return ""
        try:
            job_id = Message.decode(data).options.get(JOB_ID)
        except Exception:  # an undecodable message was dead-lettered for being one
            return ""
        return job_id if isinstance(job_id, str) else ""

    def _failed_message(self, job_id: str) -> tuple[str, str, bytes | None]:
        """``(dead-letter key, failed redis id, message data)`` of a failed job."""
        record = self.jobs.record(job_id) or {}
        failed_id = record.get("cur", "")
        xq = self.xq_key(record.get("queue") or "unknown")
        data: Any = self.client.hget(f"{xq}.msgs", failed_id) if failed_id else None
        return xq, failed_id, data

    def retry(self, job_id: str, operator: str) -> str:
        """Send failed job ``job_id`` back to its queue as a new message with its attempts
        reset. Returns the job's new state (``waiting``, ``parked``) or why it could not be
        retried (``not_failed``, ``changed``, ``gone``)."""
        xq, failed_id, data = self._failed_message(job_id)
        if data is None:
            record = self.jobs.record(job_id)
            return "gone" if record and record.get("state") == "failed" else "not_failed"
        failed = Message.decode(data)
        revived = failed.copy(
            queue_name=q_name(failed.queue_name),
            message_id=str(uuid4()),
            options={REDIS_MESSAGE_ID: str(uuid4()), FAILURES: 0},
        )
        for key in (ETA, WINDOW_RESERVATION, WINDOW_ADMITTED):
            revived.options.pop(key, None)
        options: dict[str, Any] = revived.options
        reply = self._revive(
            keys=[self.namespace],
            args=[
                job_id,
                failed_id,
                xq,
                revived.message_id,
                options[REDIS_MESSAGE_ID],
                revived.encode(),
                revived.queue_name,
                options.get(GROUP, ""),
                options.get(GROUP_CAP, 0),
                now_ms(),
                QUEUED_LEASE_MS,
                operator,
            ],
        )
        return as_text(reply)

    def discard(self, job_id: str, operator: str) -> str:
        """Drop failed job ``job_id``'s dead letter for good. Returns ``discarded`` or why
        it could not be (``not_failed``, ``changed``, ``gone``)."""
        xq, failed_id, _data = self._failed_message(job_id)
        if not failed_id:
            return "not_failed"
        reply = self._discard(
            keys=[self.namespace], args=[job_id, failed_id, xq, now_ms(), operator]
        )
        return as_text(reply)
