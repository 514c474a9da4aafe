"""A worker process of one tier, and the pool of them that ``speedtier worker`` runs.

Liveness: each worker process beats a heartbeat file while all its consumer and worker
threads run; a pool beats its own only while every child runs and beats
(``speedtier alive worker-<tier>``). Metrics: the pool (or a lone worker process) answers
``GET /metrics`` on ``SPEEDTIER_METRICS_PORT`` (9191; 0 turns it off), summing its
children's values through ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory when the
variable is not set). ``speedtier_worker_threads{tier}`` is the worker threads of processes
whose threads all run: set at each heartbeat, dropped when a process exits (the pool marks a
dead child's values dead), so ``sum by (tier)`` over the pods is the tier's live capacity.

A pool's children are forked from a server that imported :data:`FORK_SERVER_PRELOAD` once
for all of them (``services.app.fork_server``). This module is what a child runs and is part
of that preload, so it leaves the command line library (click) to ``services.app.cli.worker``:
a child never parses a command line. A worker process builds its products' actors once it
consumes (``services.app.warm_up``, ``router.deferred``), and its garbage collector is off
until then.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from services.app.server_first import FORK_SERVER_PRELOAD, share_metrics

if TYPE_CHECKING:
    from prometheus_client import Gauge

    from services.app.worker_pool import WorkerPool
    from shared.config import Settings

log = logging.getLogger(__name__)


def component_of(tier: str) -> str:
    return f"worker-{tier}"


def worker_threads_gauge() -> Gauge:
    from shared import metrics

    return metrics.gauge(
        "worker_threads",
        "Worker threads of live worker processes (every consumer and worker thread running).",
        ["tier"],
    )


def start_metrics(settings: Settings) -> None:
    """Share values with this process's children, and serve them when a port is set."""
    from shared import metrics

    share_metrics()
    metrics.use_directory(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)


def beat_of(
    beat_file: Path, live: Callable[[], None], checks: Sequence[Callable[[], None]]
) -> Callable[[], None]:
    """What a worker process does at each heartbeat: touch ``beat_file`` (what its liveness
    probe reads), call ``live`` (the threads gauge), then each of ``checks``. A check that
    fails is logged and never stops the worker; a heartbeat file that cannot be written is
    logged at ERROR (the liveness probe then stops the worker, with its drain)."""
    from shared import heartbeat

    def beat() -> None:
        try:
            heartbeat.beat(beat_file)
        except OSError as exc:
            log.error("cannot write the heartbeat file %s: %s", beat_file, exc)
        live()
        for check in checks:
            try:
                check()
            except Exception:
                log.exception("periodic check failed")

    return beat


def run_one(
    tier: str, threads: int, prefetch: int, pooled: bool = False, settings: Settings | None = None
) -> None:
    """One worker process. A pool's child gets the settings its parent loaded and checked
    (Redis's persistence included): it neither reads them again nor repeats the check."""
    gc.disable()  # until start-up is done (tiers.gc_tuning): no collection walks the imports
    # What a pool's fork server imported before forking this child, or, in a lone worker
    # process, the same modules loaded the same way now.
    import services.app.fork_server  # noqa: F401
    from services.app.bootstrap import bootstrap
    from services.app.warm_up import WarmUp
    from shared import heartbeat
    from shared.clock_offset import ClockWatch
    from shared.redis_persistence import EvictionWatch
    from tiers.settle_metrics import round_trip_recorder
    from tiers.table import TIERS
    from tiers.worker import serve

    component = component_of(tier)
    platform = bootstrap(
        settings, component=component, defer=True, redis_checked=settings is not None
    )
    settings = platform.settings
    if not pooled:
        start_metrics(settings)
    beat_file = heartbeat.heartbeat_path(component, os.getpid() if pooled else None)
    live = worker_threads_gauge().labels(tier)
    broker = platform.brokers.of_tier(tier)
    broker.jobs.report_settles(round_trip_recorder(tier))
    eviction = EvictionWatch(settings)
    clock = ClockWatch(settings)
    stop = threading.Event()
    warm_up = WarmUp(platform, tier, stop, delay=settings.worker_poll_ms / 1000)
    warm_up.start()

    # A Redis set to evict keys since the start; this host's clock against Redis's.
    beat = beat_of(beat_file, lambda: live.set(threads), (eviction.tick, clock.tick))
    try:
        serve(
            broker,
            platform.registry.queues_of_tier(tier),
            threads=threads,
            prefetch=TIERS[tier].prefetch(threads, prefetch or settings.queue_prefetch),
            drain_seconds=settings.worker_drain_seconds,
            poll_ms=settings.worker_poll_ms,
            stop=stop,
            on_beat=beat,
            beat_seconds=heartbeat.BEAT_SECONDS,
            on_start=warm_up.consuming,
            tune_collector=False,
        )
    finally:
        live.set(0)
        heartbeat.clear(beat_file)
    warm_up.raise_failure()


def worker_pool(tier: str, processes: int, threads: int, prefetch: int) -> WorkerPool:
    """``processes`` children of :func:`run_one`, forked from a server that imported
    :data:`FORK_SERVER_PRELOAD`, kept running by a :class:`~services.app.worker_pool.WorkerPool`
    (which replaces a child that dies and exits non-zero on a crash loop)."""
    from services.app.worker_pool import WorkerPool
    from shared import heartbeat

    component = component_of(tier)
    pool_beat = heartbeat.heartbeat_path(component)

    def mark_dead(pid: int) -> None:
        from shared import metrics

        metrics.mark_dead(pid)

    return WorkerPool(
        run_one,
        (tier, threads, prefetch, True),
        size=processes,
        name=tier,
        healthy=lambda pid: heartbeat.is_recent(
            heartbeat.heartbeat_path(component, pid), 3 * heartbeat.BEAT_SECONDS
        ),
        on_beat=lambda: heartbeat.beat(pool_beat),
        on_exit=mark_dead,
        preload=FORK_SERVER_PRELOAD,
    )
