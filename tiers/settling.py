"""A run's settle on its way to Redis, and the marks a delivered message carries about it.

The worker thread that ran a job hands its settle to the settle sender and goes on; the
message's post-processing waits for the answer (``tiers.consumer_thread``,
``tiers.middleware.outcomes``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Set on a delivered message once a script (settle, promote) has acknowledged it to Dramatiq.
ACKED_IN_SETTLE = "_st_acked_in_settle"
#: Set on a delivered message whose settle is on its way (a :class:`Settling`).
SETTLING = "_st_settling"


class Settling:
    """A run's settle on its way to Redis. The message's post-processing (Dramatiq's ack or
    nack, and this worker letting go of the message) waits for it: until the settle is
    answered the message is still this worker's, in Redis and in memory, so a Redis blip
    cannot hand it to another worker before its outcome is recorded."""

    __slots__ = ("_done", "_lock", "_then")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._then: Callable[[], None] | None = None

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the settle is answered (now, when it already is)."""
        with self._lock:
            if not self._done:
                self._then = action
                return
        action()

    def finish(self) -> None:
        """The settle is answered: run what waited for it."""
        with self._lock:
            self._done = True
            action, self._then = self._then, None
        if action is not None:
            action()
