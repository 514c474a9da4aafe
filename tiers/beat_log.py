"""Whether this worker's heartbeat has kept reaching Redis since a given moment: what lets a
run start without asking Redis first whether its delivery is still this worker's.

A peer takes a worker's unacked messages back only once that worker's heartbeat in Redis is
older than the heartbeat timeout (``tiers.dead_workers``). A worker whose heartbeat writes
succeeded, from the fetch of a message until now, never more than half the timeout apart,
never looked dead in that time: the message is still in its ack set, and its run may start
while the start script (``start.lua``) is on its way with the worker's settles. After a gap
(the process was stopped, the host paused, Redis was unreachable) the start waits for the
script's answer, which says whether a peer took the delivery back.

The heartbeats counted here are the fetch's (``fetch_claim.lua``) and the dead-worker
check's, which runs every poll interval whatever the worker is doing. Times are this
process's monotonic clock, taken when each call was sent (the heartbeat it wrote is no
older than that); the peers compare the heartbeat, written from this host's wall clock, with
theirs, so the half timeout left is also the room for clock skew between hosts.
"""

from __future__ import annotations

import threading
import time


class BeatLog:
    """The heartbeats of one worker that reached Redis.

    Parameters:
      heartbeat_timeout_ms: after how long without a heartbeat peers take this worker for
        dead.
    """

    def __init__(self, heartbeat_timeout_ms: float) -> None:
        #: The longest gap between two heartbeats (and since the latest) that cannot have
        #: looked like death to a peer.
        self.limit = heartbeat_timeout_ms / 1000 / 2
        self._lock = threading.Lock()
        #: Send time of the latest heartbeat that reached Redis (None: none yet).
        self._last: float | None = None
        #: Since when heartbeats reached Redis without a longer gap than the limit.
        self._since: float | None = None

    def beat(self, sent_at: float) -> None:
        """A call sent at ``sent_at`` (``time.monotonic()``) wrote the heartbeat."""
        with self._lock:
            last = self._last
            if last is None or sent_at - last > self.limit:
                self._since = sent_at
            if last is None or sent_at > last:
                self._last = sent_at

    def unbroken_since(self, moment: float) -> bool:
        """Whether heartbeats reached Redis, without a gap a peer could take for death, from
        ``moment`` (a heartbeat sent then, or before, reached Redis) until now."""
        now = time.monotonic()
        with self._lock:
            return (
                self._since is not None
                and self._last is not None
                and self._since <= moment
                and now - self._last <= self.limit
            )
