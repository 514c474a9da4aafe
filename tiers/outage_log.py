"""How a worker reports an outage of what it keeps retrying: once when it starts, then at
most every ``REPEAT_SECONDS``, and once when it answers again.

A consumer retries Redis every poll interval, and a worker has one consumer per queue (two
per family and tier with the delay queues); every job of a paused-able family reads its kill
switch from PostgreSQL. Logging every failed attempt turns a minute of downtime into
thousands of identical warnings per process: noise for the operator, and work (formatting,
handlers) for a process that should be idling until the store returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: While the outage lasts, the warning is repeated this often.
REPEAT_SECONDS = 30.0


class OutageLog:
    """One outage's reporting (not thread-safe: one thread's, or used under a lock).

    Parameters:
      logger: where the warnings go.
      subject: what failed, as the warnings name it (``consumer of kb_sync.fast``).
      recovered_as: what the end of the outage is called (``reached redis again``).
    """

    def __init__(
        self,
        logger: logging.Logger,
        subject: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        recovered_as: str = "reached redis again",
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.subject = subject
        self.recovered_as = recovered_as
        self.failures = 0
        self.began = 0.0
        self.last_warned = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        """A failed attempt: warn on the outage's first failure and then every
        ``REPEAT_SECONDS``; the attempts in between are logged at debug level."""
        now = self.clock()
        if self.failures == 0:
            self.began = now
        self.failures += 1
        if self.failures == 1 or now - self.last_warned >= REPEAT_SECONDS:
            self.last_warned = now
            self.logger.warning(
                "%s %s (%s); %d attempt(s) in %.0f s, retrying",
                self.subject,
                what,
                exc,
                self.failures,
                now - self.began,
            )
        else:
            self.logger.debug("%s %s (%s)", self.subject, what, exc)

    def recovered(self) -> None:
        """It answered: report the outage's end (nothing when there was none)."""
        if self.failures:
            self.logger.warning(
                "%s %s after %d failed attempt(s) in %.1f s",
                self.subject,
                self.recovered_as,
                self.failures,
                self.clock() - self.began,
            )
            self.failures = 0


class SharedOutage:
    """One outage reported for several threads that meet it together (every consumer of a
    worker, when Redis goes away): one warning when the first of them fails, the repeat every
    ``REPEAT_SECONDS``, and one line when the last of them answers again. Thread-safe.

    Parameters:
      logger, subject, clock, recovered_as: as for :class:`OutageLog`.
    """

    def __init__(
        self,
        logger: logging.Logger,
        subject: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        recovered_as: str = "reached redis again",
    ) -> None:
        self._log = OutageLog(logger, subject, clock, recovered_as=recovered_as)
        self._lock = threading.Lock()
        self._failing: set[str] = set()

    def failed(self, member: str, what: str, exc: BaseException) -> None:
        """``member`` (a queue's consumer) failed an attempt."""
        with self._lock:
            self._failing.add(member)
            self._log.failed(f"{what} ({member})", exc)

    def recovered(self, member: str) -> None:
        """``member`` answered again; the outage ends when none is failing any more."""
        with self._lock:
            if member not in self._failing:
                return
            self._failing.discard(member)
            if not self._failing:
                self._log.recovered()

    def failing(self, member: str) -> bool:
        """Whether ``member`` failed since it last answered."""
        with self._lock:
            return member in self._failing
