"""Runs of suspect jobs (an earlier run of theirs ended without a settle: it may have killed
its worker) go alone: no other run of the worker process is in progress, and every settle
sent before is answered, so a crash it causes again is counted against it only.

Without it, the jobs a poison job's worker runs beside it die with it, come back with it (a
dead worker's messages return together) and die with it again: after three crashes they
would fail as ``worker_died`` too.

=========================  =================================================================
a run                      waits until
=========================  =================================================================
ordinary (before start)    no suspect runs, or waits to run, in this process
suspect (before start)     no other run is in progress here; then the settles on their way
                           are answered
=========================  =================================================================

A suspect's own settle is answered before the next run starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class SuspectGate:
    """One worker process's gate: many ordinary runs at once, or one suspect alone."""

    def __init__(self) -> None:
        # Every run enters and leaves: they take the lock itself (``Condition``'s ``with``
        # adds Python calls) and wake the waiters only when a leave can let one go on.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running = 0
        self._alone = False
        self._queued_alone = 0

    def enter(self) -> None:
        """An ordinary run is about to start."""
        with self._lock:
            while self._alone or self._queued_alone:
                self._changed.wait()
            self._running += 1

    def leave(self) -> None:
        with self._lock:
            self._running -= 1
            # Ordinary runs wait for the suspect's turn to end, which no leave ends; a
            # suspect waits for the last ordinary run to leave.
            if self._queued_alone and not self._running:
                self._changed.notify_all()

    def enter_alone(self, flush: Callable[[], object]) -> None:
        """A suspect run is about to start (its thread left the ordinary side first);
        ``flush`` waits for the settles on their way."""
        with self._changed:
            self._queued_alone += 1
            while self._alone or self._running:
                self._changed.wait()
            self._queued_alone -= 1
            self._alone = True
        flush()

    def leave_alone(self, flush: Callable[[], object]) -> None:
        flush()
        with self._changed:
            self._alone = False
            self._changed.notify_all()
