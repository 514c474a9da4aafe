"""What each kind of thread of a worker process spends a job: its CPU (the kernel's part
apart) and its context switches, voluntary (it blocked: a wait, a lock, the interpreter
lock) and involuntary (the scheduler took its core).

A worker process runs :func:`split_worker_main` instead of ``bench.families.worker_main``
(or :func:`split_ingestion_worker_main` instead of ``bench.ingestion_stack.worker_main``):
a sampler thread reads, every :data:`SAMPLE_SECONDS`, each live thread's counters
(``testkit.thread_counts.sample``: summed by kind, the thread's class or ``<name>:<target>``
for a plain ``threading.Thread``) and appends them, with the jobs the process was handed so
far (its ``delivered`` counter), to ``<directory>/<pid>.jsonl``. :func:`measured` takes, in
each file, the samples from the first one after the process's first job to the last one
before its last, and divides each kind's growth over that window by the jobs handed out in
it (``testkit.thread_counts.per_job``): the threads' start and the drain's tail stay out.
The sampler's own thread is reported too (``probe``): what measuring costs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR
from bench.worker_pool import FIELD, FIELDS
from testkit.thread_counts import per_job, sample

#: Where the worker processes write their samples (emptied before each measure).
DIRECTORY = RESULTS_DIR / "thread_split"
SAMPLE_SECONDS = 0.5
#: The sampler thread's name (its own kind in the report).
PROBE = "probe"


def _sample_forever(shared: Any, slot: int, path: Path) -> None:
    delivered = slot * len(FIELDS) + FIELD["delivered"]
    with path.open("w") as out:
        while True:
            time.sleep(SAMPLE_SECONDS)
            line = {"at": time.monotonic(), "jobs": shared[delivered], "kinds": sample()}
            out.write(json.dumps(line) + "\n")
            out.flush()


def start_sampler(shared: Any, slot: int) -> None:
    """Sample this worker process's threads until it exits (a daemon thread)."""
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    path = DIRECTORY / f"{os.getpid()}.jsonl"
    threading.Thread(
        target=_sample_forever, args=(shared, slot, path), name=PROBE, daemon=True
    ).start()


def split_worker_main(slot: int, shared: Any, go: Any, stop: Any, *args: Any) -> None:
    """``bench.families.worker_main`` with the sampler running beside it."""
    from bench.families import worker_main

    start_sampler(shared, slot)
    worker_main(slot, shared, go, stop, *args)


def split_ingestion_worker_main(slot: int, shared: Any, go: Any, stop: Any, *args: Any) -> None:
    """``bench.ingestion_stack.worker_main`` (the production platform's fast tier) with the
    sampler running beside it."""
    from bench.ingestion_stack import worker_main

    start_sampler(shared, slot)
    worker_main(slot, shared, go, stop, *args)


def clear() -> None:
    """Forget the samples of an earlier measure."""
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for path in DIRECTORY.glob("*.jsonl"):
        path.unlink()


def measured() -> dict[str, dict[str, float]]:
    """:func:`per_job` of the samples the worker processes of the last measure wrote."""
    return per_job(sorted(DIRECTORY.glob("*.jsonl")), 1e6 / os.sysconf("SC_CLK_TCK"))
