"""Where a drained job's time went, read off the job records the drain leaves behind.

A job's record carries ``started_at`` and ``finished_at``, in the worker's milliseconds: the
fetch's claim writes ``started_at`` first, and the run's start (``start.lua``) writes it again
as the run begins; the settle writes ``finished_at`` with the time its arguments were made,
before its round trip. Their difference is therefore the job's *run*, not its time in a
worker: the wait in the prefetch buffer for a thread and the settle's trip back to Redis are
outside it.

For a grouped drain (a cap per organization), each of the ``slots`` group slots cycles: a
settle frees it and hands it to a parked job, which waits in the queue's fair order until a
fetch claims it, waits in a worker for a thread, runs, and waits for its own settle's trip,
which frees the slot again. By Little's law the mean cycle is ``slots / throughput``; what the
run leaves of it is the cycle *outside the run* (the fair order, the fetch's trip, the
worker's buffer and the settle's trip). Both are means: a record keeps no release time, so
the parts are not measured job by job (``bench.drain_anatomy`` samples them).
"""

from __future__ import annotations

import statistics
from typing import Any

#: Records read per round trip.
BATCH = 5_000


def run_spans_ms(client: Any, namespace: str) -> list[int]:
    """Milliseconds from the run's start to its settle of every finished job under
    ``namespace``."""
    keys = list(client.scan_iter(f"{namespace}:job:*", count=BATCH))
    spans: list[int] = []
    for at in range(0, len(keys), BATCH):
        pipeline = client.pipeline(transaction=False)
        for key in keys[at : at + BATCH]:
            pipeline.hmget(key, "started_at", "finished_at")
        for started, finished in pipeline.execute():
            if started is not None and finished is not None:
                spans.append(int(finished) - int(started))
    return spans


def drain_timing(spans: list[int], jobs_per_second: float, slots: int | None) -> dict[str, Any]:
    """The figures of a drain: the mean and median run (ms) and, with ``slots`` (a grouped
    drain), the mean slot cycle and its part outside the run (ms); none when no record was
    read."""
    if not spans:
        return {}  # no finished job's record left to read
    figures: dict[str, Any] = {
        "run_ms_mean": round(statistics.fmean(spans), 2),
        "run_ms_p50": statistics.median(spans),
    }
    if slots:
        cycle = slots / jobs_per_second * 1000
        figures["slot_cycle_ms"] = round(cycle, 2)
        figures["outside_run_ms"] = round(cycle - figures["run_ms_mean"], 2)
    return figures
