"""``speedtier worker``: a worker pool for one tier."""

from __future__ import annotations

import multiprocessing
import signal
import sys
from types import FrameType

import click

from shared.config import TIER_NAMES, load_settings


def _run_one(tier: str, threads: int, prefetch: int) -> None:
    from services.bootstrap import bootstrap
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
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_run_one, args=(tier, threads, prefetch), name=f"{tier}-{i}")
        for i in range(processes)
    ]
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.pid and child.is_alive():
                child.terminate() if signum == signal.SIGTERM else _interrupt(child.pid)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for child in children:
        child.start()
    failed = 0
    for child in children:
        child.join()
        if child.exitcode not in (0, -signal.SIGTERM) and not stopping:
            failed += 1
    return 1 if failed else 0


def _interrupt(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGINT)


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
    sys.exit(_supervise(tier, processes, threads, prefetch))


def register(main: click.Group) -> None:
    main.add_command(worker)
