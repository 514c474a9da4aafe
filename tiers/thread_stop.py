"""A stop that comes before the thread runs is kept.

Dramatiq's consumer and worker threads start with ``running = False`` and set it to True
when ``run`` begins, so a ``stop()`` called between ``start()`` and the thread's first
instruction is overwritten: the thread loops until the process gives up waiting for it (the
whole drain period of a worker told to stop right after it started). With this mixin,
``running`` reads False for good once ``stop()`` was called, whatever ``run`` sets later.
"""

from __future__ import annotations


class StopHonoured:
    """Mixin for a thread class with Dramatiq's ``running`` flag and ``stop()``; put it
    first among the bases."""

    _running = False
    _stop_requested = False

    @property
    def running(self) -> bool:
        return self._running and not self._stop_requested

    @running.setter
    def running(self, value: bool) -> None:
        self._running = value

    def stop(self) -> None:
        self._stop_requested = True
        super().stop()  # type: ignore[misc]
