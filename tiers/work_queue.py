"""A worker's work queue: what its consumer threads hand its worker threads, cheaper than
Dramatiq's own.

Dramatiq's ``Worker`` keeps fetched messages in a ``queue.PriorityQueue`` of
``_WorkQueueItem`` (a frozen, ordered dataclass: priority, then the time it was queued).
Per message that costs, in Python: the dataclass's ordering methods at each step of the
heap's sift (several a message with a hundred queued), and the queue's three ``Condition``
objects at each ``put``, ``get`` and ``task_done``. A sampling profile of a no-op drain put
about a tenth of a worker's Python time there.

:class:`WorkQueue` keeps the same order (lowest priority first, then first queued) in a heap
of ``(priority, sequence, item)`` tuples, which compare in C and never reach the item; a
``queue.SimpleQueue`` (C) holds one token per queued item, so a thread waiting for work
blocks and wakes in C. Every ``put`` pushes its item before its token, so a thread that
takes a token always finds an item. It offers what Dramatiq's worker and its threads use of
a ``PriorityQueue``: ``put``, ``get`` (with ``timeout``, raising ``queue.Empty``),
``get_nowait`` (``dramatiq.common.iter_queue``), ``task_done``, ``join`` and
``unfinished_tasks`` (``Worker.join``), ``qsize`` and ``empty``.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
from typing import Any


class WorkQueue:
    """A priority work queue with ``queue.PriorityQueue``'s interface as Dramatiq uses it
    (unbounded: ``put`` never blocks)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._lock = threading.Lock()
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._sequence = itertools.count()
        self._all_done = threading.Condition(self._lock)
        self._joining = 0
        #: Items put and not yet marked done (``task_done``), as ``queue.Queue`` counts them.
        self.unfinished_tasks = 0

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Queue ``item`` (anything with an integer ``priority``; lowest first)."""
        with self._lock:
            heapq.heappush(self._heap, (item.priority, next(self._sequence), item))
            self.unfinished_tasks += 1
        self._tokens.put(None)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The first item; raises ``queue.Empty`` when none came (at once, or within
        ``timeout`` seconds)."""
        self._tokens.get(block, timeout)
        with self._lock:
            return heapq.heappop(self._heap)[2]

    def get_nowait(self) -> Any:
        return self.get(False)

    def task_done(self) -> None:
        """Mark one item taken by ``get`` as processed."""
        with self._lock:
            if self.unfinished_tasks <= 0:
                raise ValueError("task_done() called too many times")
            self.unfinished_tasks -= 1
            if self.unfinished_tasks == 0 and self._joining:
                self._all_done.notify_all()

    def join(self) -> None:
        """Wait until every item put has been marked done."""
        with self._all_done:
            self._joining += 1
            try:
                while self.unfinished_tasks:
                    self._all_done.wait()
            finally:
                self._joining -= 1

    def qsize(self) -> int:
        with self._lock:
            return len(self._heap)

    def empty(self) -> bool:
        return self.qsize() == 0
