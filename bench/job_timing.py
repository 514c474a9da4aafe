"""Where a drained job's time went, read off the job records the drain leaves behind.

A job's record carries ``started_at`` (set when a worker's fetch claimed it) and
``finished_at`` (set by the script that settled its run), both in Redis's milliseconds. Their
difference is the job's time *in a worker*: waiting in the prefetch buffer for a thread,
running, and its settle's trip back to Redis.

For a grouped drain (a cap per organization), each of the ``slots`` group slots cycles: a
settle frees it and hands it to a parked job, which waits in the queue until a fetch claims
it, then spends its time in a worker until its own settle frees the slot again. By Little's
law the mean cycle is ``slots / throughput``; what the time in a worker leaves of it is the
time *between a release and the next claim* (in the queue, and the fetch's trip). Both
halves are means: a record keeps no release time, so the second half is not measured job by
job.
"""

from __future__ import annotations

import statistics
from typing import Any

#: Records read per round trip.
BATCH = 5_000


def time_in_worker_ms(client: Any, namespace: str) -> list[int]:
    """Milliseconds from claim to settle of every finished job under ``namespace``."""
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
    """The figures of a drain: the mean and median time in a worker (ms) and, with
    ``slots`` (a grouped drain), the mean slot cycle and its part between a release and the
    next claim (ms); none when no record was read."""
    if not spans:
        return {}  # no finished job's record left to read
    figures: dict[str, Any] = {
        "in_worker_ms_mean": round(statistics.fmean(spans), 2),
        "in_worker_ms_p50": statistics.median(spans),
    }
    if slots:
        cycle = slots / jobs_per_second * 1000
        figures["slot_cycle_ms"] = round(cycle, 2)
        figures["released_to_claimed_ms"] = round(cycle - figures["in_worker_ms_mean"], 2)
    return figures
