"""``speedtier worker``: a worker pool for one tier."""

from __future__ import annotations

import sys

import click

from services.app.worker_pool import WorkerPool
from shared.config import TIER_NAMES, load_settings
from shared.observability import configure_logging
from shared.redis_persistence import verify_redis_persistence
from shared.runtime_file import resolve


def _run_one(tier: str, threads: int, prefetch: int) -> None:
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component=f"worker-{tier}")
    settings = platform.settings
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=threads,
        prefetch=prefetch or settings.queue_prefetch,
        drain_seconds=settings.worker_drain_seconds,
        poll_ms=settings.worker_poll_ms,
    )


def _supervise(tier: str, processes: int, threads: int, prefetch: int) -> int:
    """Run ``processes`` children under a :class:`~services.app.worker_pool.WorkerPool`, which
    replaces a child that dies and exits non-zero on a crash loop."""
    pool = WorkerPool(_run_one, (tier, threads, prefetch), size=processes, name=tier)
    return pool.run()


@click.command("worker")
@click.option("--tier", type=click.Choice(TIER_NAMES), required=True, help="Tier to consume.")
@click.option("--processes", type=click.IntRange(min=1), help="Worker processes.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads per process.")
@click.option("--prefetch", type=click.IntRange(min=0), default=0, help="Messages fetched ahead.")
def worker(tier: str, processes: int | None, threads: int | None, prefetch: int) -> None:
    """Consume every queue of TIER until SIGTERM, then drain."""
    settings = load_settings()
    processes = processes or settings.tier_processes(tier)
    threads = threads or settings.tier_threads(tier)
    if processes == 1:
        _run_one(tier, threads, prefetch)
        return
    configure_logging(settings.log_level)
    # Checked once, before any child starts: a child that cannot start would only be restarted.
    resolved = resolve(settings)
    for name, value in (("REDIS_URL", resolved.redis_url), ("DATABASE_URL", resolved.database_url)):
        if not value:
            raise click.ClickException(f"{name} is not set (speedtier up provides one locally)")
    verify_redis_persistence(resolved)
    sys.exit(_supervise(tier, processes, threads, prefetch))


def register(main: click.Group) -> None:
    main.add_command(worker)
