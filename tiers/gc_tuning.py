"""A serving process's garbage collector (a job worker, an API worker): what start-up made
is frozen, and young objects are collected less often.

Reference counting frees a job's objects the moment they are dropped; the cyclic collector
is what remains. At CPython's defaults it runs a young collection every 700 container
allocations, and a full one once the objects promoted since the last full collection reach a
quarter of those it kept. A worker allocates a few dozen containers a job (the message, its
proxy, the settle's arguments and callbacks) and holds many of them for the milliseconds a
job waits for a thread or for its settle's answer, long enough to be promoted; so in a
no-op drain a worker ran a full collection about every 0.85 s, each 20 to 45 ms spent
walking the objects start-up made (imported modules, settings, the platform), besides
about 140 young collections a second: about a tenth of the worker's CPU.

:func:`tune_worker_collector` runs once the worker is built: before its threads start, or, in
``speedtier worker``, once the products its tier runs are built too (``router.deferred``),
the collector having been off since the process started:

- ``gc.collect()`` then ``gc.freeze()``: what start-up left alive moves to the permanent
  generation, which no collection walks (it lives as long as the process anyway), so a full
  collection walks only what was made since;
- ``gc.set_threshold(YOUNG_THRESHOLD, 10, 10)``: a young collection every
  :data:`YOUNG_THRESHOLD` allocations instead of 700. Only cyclic garbage waits longer for
  it: at most that many allocations' worth.

Measured in a no-op drain (60,000 jobs, ``python -m bench.bullmq_compare``'s drain): the
collector's time in a worker went from about 0.3 s to 0.01 s over 4 s of draining.

An API worker (``speedtier api``'s gunicorn worker, once its app is built) holds as much:
unfrozen, its full collection took 75 ms, about once per 10,000 requests, and stopped every
thread of the worker, which was the enqueue route's p99 at one client. Frozen, the
collections left under load were young ones of 2.5 to 3.5 ms.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

#: Container allocations (less deallocations) between two young collections.
YOUNG_THRESHOLD = 10_000


def tune_worker_collector() -> None:
    """Freeze the objects alive now and collect young ones every :data:`YOUNG_THRESHOLD`
    allocations, for the rest of this process (the collector is on afterwards, if start-up
    turned it off). Call it once, in a process that serves jobs or requests, when start-up
    is done."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
    gc.enable()
    log.debug("collector: %d start-up objects frozen", gc.get_freeze_count())
