"""``speedtier worker``: a worker pool for one tier.

Liveness: each worker process beats a heartbeat file while all its consumer and worker
threads run; a pool beats its own only while every child runs and beats
(``speedtier alive worker-<tier>``). Metrics: the pool (or a lone worker process) answers
``GET /metrics`` on ``SPEEDTIER_METRICS_PORT`` (9191; 0 turns it off), summing its
children's values through ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory when the
variable is not set). ``speedtier_worker_threads{tier}`` is the worker threads of processes
whose threads all run: set at each heartbeat, dropped when a process exits (the pool marks a
dead child's values dead), so ``sum by (tier)`` over the pods is the tier's live capacity.
"""

from __future__ import annotations

import os
import sys
import tempfile

import click

from services.app.worker_pool import WorkerPool
from shared import heartbeat, metrics
from shared.config import TIER_NAMES, Settings, load_settings
from shared.observability import configure_logging
from shared.redis_persistence import EvictionWatch, verify_redis_persistence
from shared.runtime_file import resolve

WORKER_THREADS = metrics.gauge(
    "worker_threads",
    "Worker threads of live worker processes (every consumer and worker thread running).",
    ["tier"],
)


def component_of(tier: str) -> str:
    return f"worker-{tier}"


def start_metrics(settings: Settings) -> None:
    """Share values with this process's children, and serve them when a port is set."""
    if not metrics.directory():
        metrics.use_directory(tempfile.mkdtemp(prefix="speedtier-metrics-"))
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)


def _run_one(tier: str, threads: int, prefetch: int, pooled: bool = False) -> None:
    from services.app.bootstrap import bootstrap
    from tiers.table import TIERS
    from tiers.worker import serve

    component = component_of(tier)
    platform = bootstrap(component=component)
    settings = platform.settings
    if not pooled:
        start_metrics(settings)
    beat_file = heartbeat.heartbeat_path(component, os.getpid() if pooled else None)
    live = WORKER_THREADS.labels(tier)
    eviction = EvictionWatch(settings)

    def beat() -> None:
        heartbeat.beat(beat_file)
        live.set(threads)
        eviction.tick()  # a Redis set to evict keys since the start is reported

    try:
        serve(
            platform.brokers.of_tier(tier),
            platform.registry.queues_of_tier(tier),
            threads=threads,
            prefetch=TIERS[tier].prefetch(threads, prefetch or settings.queue_prefetch),
            drain_seconds=settings.worker_drain_seconds,
            poll_ms=settings.worker_poll_ms,
            on_beat=beat,
            beat_seconds=heartbeat.BEAT_SECONDS,
        )
    finally:
        live.set(0)
        heartbeat.clear(beat_file)


def _supervise(tier: str, processes: int, threads: int, prefetch: int, settings: Settings) -> int:
    """Run ``processes`` children under a :class:`~services.app.worker_pool.WorkerPool`, which
    replaces a child that dies and exits non-zero on a crash loop."""
    component = component_of(tier)
    start_metrics(settings)
    pool_beat = heartbeat.heartbeat_path(component)
    pool = WorkerPool(
        _run_one,
        (tier, threads, prefetch, True),
        size=processes,
        name=tier,
        healthy=lambda pid: heartbeat.is_recent(
            heartbeat.heartbeat_path(component, pid), 3 * heartbeat.BEAT_SECONDS
        ),
        on_beat=lambda: heartbeat.beat(pool_beat),
        on_exit=metrics.mark_dead,
    )
    try:
        return pool.run()
    finally:
        heartbeat.clear(pool_beat)


@click.command("worker")
@click.option("--tier", type=click.Choice(TIER_NAMES), required=True, help="Tier to consume.")
@click.option("--processes", type=click.IntRange(min=1), help="Worker processes.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads per process.")
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    default=0,
    help="Messages fetched ahead per queue (0: SPEEDTIER_QUEUE_PREFETCH, else the tier's).",
)
def worker(tier: str, processes: int | None, threads: int | None, prefetch: int) -> None:
    """Consume every queue of TIER until SIGTERM, then drain."""
    settings = load_settings()
    processes = processes or settings.tier_processes(tier)
    threads = threads or settings.tier_threads(tier)
    if processes == 1:
        _run_one(tier, threads, prefetch)
        return
    configure_logging(settings.log_level, json_lines=settings.json_logs)
    # Checked once, before any child starts: a child that cannot start would only be restarted.
    resolved = resolve(settings)
    for name, value in (("REDIS_URL", resolved.redis_url), ("DATABASE_URL", resolved.database_url)):
        if not value:
            raise click.ClickException(f"{name} is not set (speedtier up provides one locally)")
    verify_redis_persistence(resolved)
    sys.exit(_supervise(tier, processes, threads, prefetch, settings))


def register(main: click.Group) -> None:
    main.add_command(worker)
