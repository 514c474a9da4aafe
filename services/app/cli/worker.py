"""``speedtier worker``: a worker pool for one tier (the processes themselves are
``services.app.worker_process``).

Start-up (``docs/deploy/scaling.md``): a pool's children are forked from a server that
imports the worker's modules once for all of them (``services.app.fork_server``). With
``--processes`` and ``--threads`` given (the chart gives them) the server starts before
anything else, from the program's entry point (``services.app.entry``) or, when the command
runs another way, here as soon as the command line is parsed, so its imports overlap the
pool's own start: its settings, the Redis and database URL checks and the Redis persistence
check, which still all pass before a child starts; each child gets those checked settings
rather than reading and checking them again. This module imports only click and the tier
table.
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

import click

from services.app.server_first import share_metrics
from services.app.worker_process import component_of, run_one, start_metrics, worker_pool
from tiers.table import TIERS

if TYPE_CHECKING:
    from services.app.worker_pool import WorkerPool
    from shared.config import Settings


def _supervise(pool: WorkerPool, tier: str, settings: Settings) -> int:
    from shared import heartbeat

    start_metrics(settings)
    try:
        return pool.run()
    finally:
        heartbeat.clear(heartbeat.heartbeat_path(component_of(tier)))


@click.command("worker")
@click.option("--tier", type=click.Choice(tuple(TIERS)), required=True, help="Tier to consume.")
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
    gc.disable()  # while the modules load (a lone worker process's until it is built)
    pool = None
    if processes is not None and processes > 1 and threads is not None:
        # The children's server imports while this process reads and checks its settings
        # (already started when the program's entry point saw this command line).
        share_metrics()
        pool = worker_pool(tier, processes, threads, prefetch)
        pool.prepare()
    from shared.config import load_settings

    settings = load_settings()
    processes = processes or settings.tier_processes(tier)
    threads = threads or settings.tier_threads(tier)
    if processes == 1:
        run_one(tier, threads, prefetch)
        return
    from shared.observability import configure_logging
    from shared.redis_persistence import verify_redis_persistence
    from shared.runtime_file import resolve

    configure_logging(settings.log_level, json_lines=settings.json_logs)
    # Checked once, before any child starts: a child that cannot start would only be restarted.
    resolved = resolve(settings)
    for name, value in (("REDIS_URL", resolved.redis_url), ("DATABASE_URL", resolved.database_url)):
        if not value:
            raise click.ClickException(f"{name} is not set (speedtier up provides one locally)")
    verify_redis_persistence(resolved)
    if pool is None:
        share_metrics()
        pool = worker_pool(tier, processes, threads, prefetch)
    pool.args = (tier, threads, prefetch, True, resolved)  # what run_one gets: checked above
    gc.enable()
    sys.exit(_supervise(pool, tier, settings))


def register(main: click.Group) -> None:
    main.add_command(worker)
