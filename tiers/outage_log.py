"""How a consumer thread reports a Redis outage: once when it starts, then at most every
``REPEAT_SECONDS``, and once when Redis answers again.

A consumer retries every poll interval, and a worker has one consumer per queue (two per
family and tier with the delay queues), so logging every failed attempt turns a minute of
Redis downtime into thousands of identical warnings per process: noise for the operator,
and work (formatting, handlers) for a process that should be idling until Redis returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: While Redis stays unreachable, a consumer repeats its warning this often.
REPEAT_SECONDS = 30.0


class OutageLog:
    """One consumer thread's outage reporting (not shared between threads)."""

    def __init__(
        self,
        logger: logging.Logger,
        queue_name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.queue_name = queue_name
        self.failures = 0
        self.began = 0.0
        self.last_warned = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        """A Redis error: warn on the outage's first failure and then every
        ``REPEAT_SECONDS``; the attempts in between are logged at debug level."""
        now = self.clock()
        if self.failures == 0:
            self.began = now
        self.failures += 1
        if self.failures == 1 or now - self.last_warned >= REPEAT_SECONDS:
            self.last_warned = now
            self.logger.warning(
                "consumer of %s %s (%s); %d attempt(s) in %.0f s, retrying",
                self.queue_name,
                what,
                exc,
                self.failures,
                now - self.began,
            )
        else:
            self.logger.debug("consumer of %s %s (%s)", self.queue_name, what, exc)

    def recovered(self) -> None:
        """Redis answered: report the outage's end (nothing when there was none)."""
        if self.failures:
            self.logger.warning(
                "consumer of %s reached redis again after %d failed attempt(s) in %.1f s",
                self.queue_name,
                self.failures,
                self.clock() - self.began,
            )
            self.failures = 0
