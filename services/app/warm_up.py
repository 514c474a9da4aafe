"""What a worker process does beside its start, in a thread of its own, so that its first
fetch waits for none of it (``speedtier worker``; ``docs/deploy/scaling.md``).

=====================================  ===============================================
when                                   what the warm-up does
=====================================  ===============================================
while the worker's threads start       reads the kill switches of its tier's families,
                                       which connects to PostgreSQL: the first job finds
                                       them in the flags' cache (read no earlier than
                                       that cache keeps a value anyway)
a poll interval after it consumes      builds the products its tier runs
                                       (``router.deferred``; the first jobs meanwhile
                                       build what they need themselves, without this
                                       thread's imports holding the interpreter lock
                                       they need), then tunes the collector, off since
                                       the process started (``tiers.gc_tuning``)
a product cannot be built              logs it, stops the worker, which then exits with
                                       that error (as when products were built before
                                       it consumed); the pool restarts it
the worker stops first                 builds nothing
=====================================  ===============================================
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from tiers.gc_tuning import tune_worker_collector

if TYPE_CHECKING:
    from services.app.bootstrap import Platform

log = logging.getLogger(__name__)


class WarmUp:
    """The warm-up of one worker process serving ``tier``: :meth:`start` it before the worker
    serves, call :meth:`consuming` once its threads run; ``stop`` is the worker's stop event,
    ``delay`` the seconds between its consuming and the build (its poll interval)."""

    def __init__(self, platform: Platform, tier: str, stop: threading.Event, delay: float) -> None:
        self.platform = platform
        self.tier = tier
        self.stop = stop
        self.delay = delay
        self.failure: BaseException | None = None
        self._consuming = threading.Event()
        self.thread = threading.Thread(target=self._run, name="warm-up", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def consuming(self) -> None:
        """The worker's threads run: the products may be built now."""
        self._consuming.set()

    def _run(self) -> None:
        self._read_kill_switches()
        self._consuming.wait()
        if self.stop.wait(self.delay):
            return
        try:
            self.platform.build_deferred(self.tier)
        except Exception as exc:
            log.critical("cannot build the %s tier's products; stopping", self.tier, exc_info=True)
            self.failure = exc
            self.stop.set()
        tune_worker_collector()

    def _read_kill_switches(self) -> None:
        queues = set(self.platform.registry.queues_of_tier(self.tier))
        flags = {f.pause_flag for f in self.platform.registry if queues & set(f.queues())}
        try:
            self.platform.flags.read_many([flag for flag in flags if flag])
        except Exception as exc:  # each job reads its own again, and meets the error there
            log.info("kill switches not read ahead: %s", exc)

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure
