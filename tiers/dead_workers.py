"""A dead worker's messages back to their queues on a schedule, not at a random draw.

Dramatiq returns a dead worker's unacked messages in its maintenance, which rides on a
random share of fetches (its broker's ``maintenance_chance``): a dead worker's jobs would
come back anywhere from seconds to minutes after its heartbeat timeout. Here the draw is
never made (``TierBroker._should_do_maintenance``), and one thread of each worker, every poll
interval:

- gives the worker's heartbeat (a worker whose threads are all busy, with its prefetch full,
  fetches nothing, and would otherwise look dead);
- asks Redis for workers whose heartbeat is older than the heartbeat timeout (by Redis's
  clock, ``tiers/lua/look.lua``: a worker whose host clock ran ahead takes no live worker
  for dead); for any it has not handled yet at that heartbeat, runs Dramatiq's maintenance
  (its dispatch script, the one that returns a dead worker's messages) on each of this
  worker's queues and wakes their consumers. A dead worker's jobs are back in their queues
  within the heartbeat timeout plus one poll interval;
- every ``SWEEP_SECONDS`` runs that maintenance anyway, which also drops dead letters older
  than Dramatiq's dead-message TTL.

A worker that stalls (SIGSTOP, a VM pause) and resumes after its messages were taken back
finds, at each run's start, that the delivery is no longer its own (``start.lua``).

Dramatiq's maintenance looks a dead worker's remaining ack sets up with ``KEYS`` until they
are all gone (then it forgets the worker): a look runs it only for a dead worker it has not
handled at that heartbeat, and on the sweep, so a dead worker costs each live worker of its
Redis one maintenance per queue, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tiers.lua_scripts import load_script
from tiers.outage_log import OutageLog
from tiers.redis_values import as_text, now_ms

if TYPE_CHECKING:
    from tiers.broker import TierBroker

log = logging.getLogger(__name__)

#: How often the maintenance runs on every queue even when no worker died (dead letters
#: past their TTL are dropped by it).
SWEEP_SECONDS = 600.0
#: Dead workers read per look (the rest on the next ones).
MAX_DEAD_PER_LOOK = 100


class DeadWorkers:
    """Returns dead workers' messages of one worker's queues.

    Parameters:
      broker: the worker's broker.
      queues: the worker's queue names (main and delay queues), read at each look.
      interval_seconds: how often to look (the worker's poll interval).
    """

    def __init__(
        self, broker: TierBroker, queues: Callable[[], list[str]], interval_seconds: float
    ) -> None:
        self.broker = broker
        self.queues = queues
        self.interval = max(0.01, interval_seconds)
        #: (worker id, heartbeat) of dead workers whose messages of these queues went back.
        self._handled: set[tuple[str, float]] = set()
        self._next_sweep = time.monotonic() + SWEEP_SECONDS
        self._stop = threading.Event()
        self._outage = OutageLog(log, "dead-worker check")
        self._look = broker.client.register_script(load_script("look"))
        self.thread = threading.Thread(target=self._run, name="dead-workers", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)

    def look(self) -> list[str]:
        """One look: the heartbeat, then the dead workers' messages back. Returns the ids of
        the dead workers handled by this look."""
        broker = self.broker
        sent = time.monotonic()
        redis_now, listed = self._look(
            keys=[broker.namespace],
            args=[broker.broker_id, now_ms(), broker.heartbeat_timeout, MAX_DEAD_PER_LOOK],
        )
        broker.jobs.beats.beat(sent)
        dead = {(as_text(listed[i]), float(listed[i + 1])) for i in range(0, len(listed), 2)}
        new = dead - self._handled
        sweep = time.monotonic() >= self._next_sweep
        if new or sweep:
            for queue in self.queues():
                broker.maintain(queue, at_ms=int(redis_now))
                if not queue.endswith(".DQ"):
                    broker.wake(queue)
            if sweep:
                self._next_sweep = time.monotonic() + SWEEP_SECONDS
        # Forget those no longer listed (their messages all went back): the set stays small.
        self._handled = dead
        if new:
            log.warning(
                "returned the unacked messages of %d dead worker(s) to their queues", len(new)
            )
        return sorted(worker for worker, _ in new)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
                self._outage.recovered()
            except Exception as exc:
                self._outage.failed("cannot return dead workers' messages", exc)
