"""Real worker processes for the daily agent evaluation reports: each builds the production
platform with ``bootstrap()`` from the settings it is given and consumes the maintenance
tier. Shared by the reports' fault tests and ``python -m bench.reports_day``."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from multiprocessing.process import BaseProcess
from typing import Any

from tiers.faults import FAULT_ENV
from tiers.policies import RetryPolicy

#: A killed worker's message comes back within seconds: heartbeat timeout 2 s.
FAST_RECOVERY = {"heartbeat_timeout_seconds": 2.0}


def worker_main(values: dict[str, Any], retry: tuple[int, float], threads: int) -> None:
    """Serve the maintenance tier until SIGTERM; ``retry`` (attempts, base seconds) replaces
    the report family's backoff so a run does not wait minutes between attempts."""
    from services.app.bootstrap import bootstrap
    from services.reports.families import FAMILY
    from shared.config import load_settings
    from tiers.worker import serve

    platform = bootstrap(load_settings(**values), component="reports-worker")
    by_name = platform.registry.by_name()
    by_name[FAMILY] = dataclasses.replace(
        by_name[FAMILY], retry=RetryPolicy(max_attempts=retry[0], base_seconds=retry[1])
    )
    try:
        serve(
            platform.broker,
            platform.registry.queues_of_tier("maintenance"),
            threads=threads,
            poll_ms=50,
            drain_seconds=5,
        )
    finally:
        platform.close()


def start_worker(
    values: dict[str, Any],
    *,
    fault: str | None = None,
    retry: tuple[int, float] = (3, 0.2),
    threads: int = 2,
) -> BaseProcess:
    """A worker process; ``fault`` arms a fault point (``tiers.faults``) in it only."""
    process = multiprocessing.get_context("spawn").Process(
        target=worker_main, args=({**FAST_RECOVERY, **values}, retry, threads), daemon=True
    )
    saved = os.environ.get(FAULT_ENV)
    if fault:
        os.environ[FAULT_ENV] = fault
    try:
        process.start()
    finally:
        if saved is None:
            os.environ.pop(FAULT_ENV, None)
        else:
            os.environ[FAULT_ENV] = saved
    return process


def stop(*processes: BaseProcess) -> None:
    """SIGTERM (drain), then SIGKILL whatever is still alive after 15 s."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=15)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
