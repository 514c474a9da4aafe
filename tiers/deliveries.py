"""The delivery a worker thread is running, as its handler can see it.

Each run starts with a fencing token, the epoch the start script gave it
(``tiers/lua/start.lua``); a run whose worker stalled past its heartbeat timeout may have
been delivered again elsewhere, under a newer epoch, and its own settle is then refused.
A handler that is about to commit an effect that must not happen twice can ask first:

===========================  ================================================================
call                         answer
===========================  ================================================================
``delivery_lost()``          True once the worker's delivery check (every few seconds, and
                             right after a stall) saw a newer run of this job; no round trip
``check_delivery()``         asks Redis now (one round trip) and raises
                             ``shared.errors.DeliveryLost`` when a newer run exists
===========================  ================================================================

Both are no-ops outside a run, and for a run started without a token (a record written by
older scripts, or one Redis lost).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.errors import DeliveryLost

if TYPE_CHECKING:
    from tiers.job_store import JobStore


#: How long ``check_delivery()`` waits for the answer to its run's start on its way.
ANSWER_WAIT_SECONDS = 10.0

#: Serializes :meth:`Latch.set` (two threads may mark one delivery lost at once).
_SETTING = threading.Lock()


class Latch:
    """A flag set once and waited for: ``threading.Event``'s ``is_set``, ``set`` and ``wait``
    on one held lock, released when set. Two are made for every run; an ``Event`` is a
    ``Condition`` over its own lock, built in Python, and its making showed in a no-op
    drain's profile."""

    __slots__ = ("_held", "_set")

    def __init__(self) -> None:
        self._set = False
        self._held = threading.Lock()
        self._held.acquire()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with _SETTING:
            if not self._set:
                self._set = True
                self._held.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the flag is set, waiting up to ``timeout`` seconds (None: for ever)."""
        if self._set:
            return True
        if self._held.acquire(timeout=-1 if timeout is None else timeout):
            self._held.release()
            return True
        return self._set


@dataclass
class Delivery:
    """One running delivery: its job, its epoch and whether a newer run was seen. A run whose
    start is on its way (sent ahead of its settle) has no epoch until the start's answer
    came (``answered``), and is known meanwhile by its start id."""

    jobs: JobStore
    job_id: str
    epoch: str
    lost: Latch = field(default_factory=Latch)
    start_id: str = ""
    answered: Latch | None = None

    @property
    def fenced(self) -> bool:
        return self.epoch not in ("", "0")

    def lost_now(self) -> bool:
        """Ask Redis whether a newer run of the job started (and remember it)."""
        if self.lost.is_set():
            return True
        if self.answered is not None and not self.answered.wait(ANSWER_WAIT_SECONDS):
            return False  # no answer yet (Redis unreachable): nothing newer can be seen
        if self.lost.is_set():
            return True
        if not self.fenced:
            return False
        [(epoch, _)] = self.jobs.epochs([self.job_id])
        if later_start(epoch, self.epoch):
            self.lost.set()
        return self.lost.is_set()


def later_start(epoch: str | None, mine: str) -> bool:
    """Whether a job record's ``epoch`` is a later start than a run's (``mine``): only that
    supersedes the run (a record replaced since, by a new job of the same id, starts its
    epochs again: not a newer run of the same delivery)."""
    try:
        return epoch is not None and int(epoch) > int(mine)
    except ValueError:
        return epoch is not None and epoch != mine


_running = threading.local()


def set_current(delivery: Delivery | None) -> None:
    """The delivery this thread now runs (None: none)."""
    _running.delivery = delivery


def current() -> Delivery | None:
    delivery: Delivery | None = getattr(_running, "delivery", None)
    return delivery


def delivery_lost() -> bool:
    """Whether this thread's run is known to have lost its delivery (no round trip)."""
    delivery = current()
    return delivery is not None and delivery.lost.is_set()


def check_delivery() -> None:
    """Raise :class:`DeliveryLost` when this thread's run lost its delivery (asks Redis)."""
    delivery = current()
    if delivery is not None and delivery.lost_now():
        raise DeliveryLost(f"job {delivery.job_id}: run {delivery.epoch} was delivered again")
