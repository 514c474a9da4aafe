"""What an idle worker costs: its own CPU, Redis's CPU and Redis commands a second, per tier,
with idle queues watched (``tiers.queue_watch``, the default) and with every consumer polling
its own queue (Dramatiq's way, the baseline).

  python -m bench.idle_workers              # 10 s per measure, 2 rounds
  python -m bench.idle_workers --quick      # 4 s, 1 round

Each measure is one worker process serving a tier's queues (every registered family's, and
their delay queues) with the tier's default threads and poll interval (``WORKER_POLL_MS``,
500 ms; ``--poll-ms`` to change it), on a redis-server of the benchmark's own (so ``INFO``
counts nobody else's commands), after a few seconds of warm-up. No database is needed: an
idle worker never opens a session. Modes alternate within each round.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import redis

from bench.common import command_calls, command_delta, markdown_table, rnd, write_result
from bench.redis_cpu import cpu_now, redis_server
from bench.worker_pool import WorkerPool, stop_event_from, wait_for_go

NAME = "idle_workers"
TIERS = ("fast", "slow", "maintenance")
MODES = ("polling", "watched")
WARM_UP_SECONDS = 3.0


def worker_main(
    slot: int, shared: Any, go: Any, stop: Any, redis_url: str, tier: str, poll_ms: int, watch: bool
) -> None:
    """A worker process: the production platform serving ``tier``, idle, until ``stop``."""
    from services.app.bootstrap import bootstrap
    from shared.config import load_settings
    from tiers.worker import serve

    settings = load_settings(
        redis_url=redis_url, database_url="postgresql://idle@127.0.0.1:1/unused"
    )
    platform = bootstrap(settings, component=f"bench-idle-{tier}")
    stopping = stop_event_from(stop)
    wait_for_go(shared, slot, go)
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=settings.tier_threads(tier),
        stop=stopping,
        poll_ms=poll_ms,
        drain_seconds=1,
        watch=watch,
    )
    platform.close()


def measure(url: str, tier: str, mode: str, poll_ms: int, seconds: float) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    pool = WorkerPool(
        worker_main, (url, tier, poll_ms, mode == "watched"), 1, name=f"{NAME}-{tier}"
    )
    try:
        pool.start()
        pool.go()
        time.sleep(WARM_UP_SECONDS)
        cpu, redis_cpu, calls = pool.cpu_seconds(), cpu_now(client)["total"], command_calls(client)
        started = time.perf_counter()
        time.sleep(seconds)
        wall = time.perf_counter() - started
        cpu = pool.cpu_seconds() - cpu
        redis_cpu = cpu_now(client)["total"] - redis_cpu
        delta = command_delta(calls, command_calls(client))
    finally:
        pool.shutdown()
        client.flushdb()
        client.close()
    # The measure's own INFO calls (a worker sends none once started) are not the worker's.
    delta.pop("info", None)
    # Commands a client sends (a script's own calls are counted apart by INFO).
    sent = sum(v for k, v in delta.items() if k in ("evalsha", "eval"))
    return {
        "tier": tier,
        "mode": mode,
        "worker_cpu_percent": rnd(cpu / wall * 100, 2),
        "redis_cpu_percent": rnd(redis_cpu / wall * 100, 2),
        "redis_commands_per_second": rnd(sum(delta.values()) / wall, 1),
        "round_trips_per_second": rnd(sent / wall, 1),
    }


def run(
    *,
    quick: bool = False,
    redis_url: str | None = None,
    poll_ms: int | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Every tier in both modes on a Redis of the benchmark's own (``redis_url`` is not
    used: another client's commands would count)."""
    from shared.config import Settings

    poll = poll_ms or int(Settings.model_fields["worker_poll_ms"].default)
    seconds = 4.0 if quick else 10.0
    rounds = rounds or (1 if quick else 2)
    samples: list[dict[str, Any]] = []
    with redis_server(appendonly=False) as url:
        for round_ in range(rounds):
            for tier in TIERS:
                modes = MODES if round_ % 2 == 0 else MODES[::-1]
                for mode in modes:
                    samples.append(measure(url, tier, mode, poll, seconds))
                    print(f"<!-- {tier} {mode}: {samples[-1]} -->", file=sys.stderr, flush=True)
    rows = {}
    for tier in TIERS:
        for mode in MODES:
            mine = [s for s in samples if s["tier"] == tier and s["mode"] == mode]
            rows[f"{tier}.{mode}"] = {
                key: rnd(sorted(s[key] for s in mine)[len(mine) // 2], 2)
                for key in mine[0]
                if key not in ("tier", "mode")
            }
    return {
        "settings": {"poll_ms": poll, "seconds": seconds, "rounds": rounds},
        "load_average": rnd(os.getloadavg()[0], 2),
        "results": rows,
        "samples": samples,
        "targets": {},
    }


def summary(result: dict[str, Any]) -> str:
    rows = []
    for tier in TIERS:
        polling, watched = (
            result["results"][f"{tier}.polling"],
            result["results"][f"{tier}.watched"],
        )
        for label, key in (
            ("worker CPU, % of a core", "worker_cpu_percent"),
            ("Redis CPU, % of a core", "redis_cpu_percent"),
            ("Redis commands/s", "redis_commands_per_second"),
            ("client round trips/s", "round_trips_per_second"),
        ):
            ratio = watched[key] / polling[key] if polling[key] else 0.0
            rows.append([tier, label, polling[key], watched[key], f"{ratio:.2f}"])
    settings = result["settings"]
    return "\n".join(
        [
            "### Idle workers\n",
            f"One worker process per tier, idle, poll {settings['poll_ms']} ms, median of "
            f"{settings['rounds']} round(s) of {settings['seconds']:.0f} s; load average "
            f"{result['load_average']} at the end.\n",
            markdown_table(["tier", "measure", "polling", "watched", "watched / polling"], rows),
            f"\n_Results in bench/results/{NAME}.json._",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m bench.{NAME}", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="4 s a measure, one round")
    parser.add_argument("--poll-ms", type=int, help="the workers' poll interval (default 500)")
    parser.add_argument("--rounds", type=int, help="rounds (default 2; quick 1)")
    options = parser.parse_args(argv)
    result = run(quick=options.quick, poll_ms=options.poll_ms, rounds=options.rounds)
    write_result(NAME, result)
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
