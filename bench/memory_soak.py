"""Memory soak: one worker process drains a long stream of no-op jobs while its resident set
is sampled, for raw Dramatiq and for the platform, one after the other: how far the
worker's RSS is above raw Dramatiq's, and whether it stays flat over a long run.

Each side: one worker process (``--threads`` threads, prefetch 200, poll 100 ms) is started,
then the driver keeps about ``--depth`` jobs queued (raw: ``actor.send``; platform:
``Router.enqueue_many`` of a family with no group cap) until ``--jobs`` have been acked.
Every ``--sample-seconds`` the driver reads the worker's VmRSS; the report gives the resident
set after the warm-up (the first 5% of the jobs), at the end and at its highest, and the
slope of a least-squares line through the samples after the warm-up, in MiB per 100,000
jobs: "flat" means the slope stays under 1 MiB per 100,000 jobs. Redis's ``used_memory`` is
reported beside it (the platform keeps each finished job's record for its retention).

The soaked platform worker runs the benchmark's families, not the products: it measures
what the platform adds to a Dramatiq worker. What a deployed worker holds is measured
after the soaks: ``speedtier worker --tier <tier> --processes 1`` itself (the console
script, every product registered, metrics on with ``SPEEDTIER_METRICS_PORT=0``) is started
once per tier on a fresh namespace and PostgreSQL (``TEST_DATABASE_URL`` / ``DATABASE_URL``;
it runs no job, so an unmigrated database does), and its resident set is read once it
consumes (``--no-speedtier-worker`` skips it).

  python -m bench.memory_soak                  # 1,000,000 jobs a side (long: ~1 h here)
  python -m bench.memory_soak --jobs 100000    # a shorter soak
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from cryptography.fernet import Fernet

from bench.common import (
    REDIS_URL,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    new_namespace,
    read_status_kib,
    write_result,
)
from bench.throughput import ORGANIZATION, RAW_QUEUE, TIER_QUEUE, raw_noop, raw_worker_main
from bench.worker_pool import WorkerPool

WARM_UP_SHARE = 0.05
BATCH = 500


def _raw_sender(redis_url: str, namespace: str) -> tuple[Any, Any]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=redis_url, namespace=namespace)  # type: ignore[no-untyped-call]
    actor = dramatiq.actor(broker=broker, actor_name="raw_noop", queue_name=RAW_QUEUE)(raw_noop)

    def send(start: int, count: int) -> None:
        for i in range(start, start + count):
            actor.send(organization_id=ORGANIZATION, item=str(i))

    return send, broker


def _platform_sender(redis_url: str, namespace: str) -> tuple[Any, Any]:
    from bench.families import make_broker, make_router
    from router.requests import JobRequest

    broker, fams = make_broker(redis_url, namespace, name="soak-enqueue")
    router = make_router(broker, fams)

    def send(start: int, count: int) -> None:
        router.enqueue_many(
            [
                JobRequest("bench_noop", ORGANIZATION, {"item": str(i)})
                for i in range(start, start + count)
            ]
        )

    return send, broker


def _slope_per_100k(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (acked jobs, RSS MiB), scaled to MiB per 100,000 jobs."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    var = sum((x - mean_x) ** 2 for x, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((x - mean_x) * (y - mean_y) for x, y in samples)
    return cov / var * 100_000


def soak(side: str, options: argparse.Namespace) -> dict[str, Any]:
    namespace = new_namespace(f"soak-{side}")
    client = connect(options.redis_url)
    if side == "raw":
        target: Any = raw_worker_main
        args: tuple[Any, ...] = (options.redis_url, namespace)
        send, broker = _raw_sender(options.redis_url, namespace)
    else:
        from bench.families import worker_main

        target = worker_main
        args = (options.redis_url, namespace, [TIER_QUEUE])
        send, broker = _platform_sender(options.redis_url, namespace)
    args += (options.threads, 200, 100)
    pool = WorkerPool(target, args, 1, name=f"soak-{side}")
    samples: list[tuple[float, float]] = []
    load = [os.getloadavg()[0]]
    started = time.monotonic()
    try:
        pool.start()
        pool.go()
        pid = pool.processes[0].pid
        assert pid is not None
        sent = 0
        next_sample = 0.0
        warm_up = options.jobs * WARM_UP_SHARE
        while True:
            acked = int(pool.total("acked"))
            if acked >= options.jobs:
                break
            # Sampled before sending: when the driver's sends are the bottleneck (raw
            # Dramatiq's one-by-one send), it is always sending and would never sample.
            # Sampled also as the warm-up ends, so a run shorter than a sampling period
            # still reports its resident set after the warm-up.
            now = time.monotonic()
            warmed = acked >= warm_up and (not samples or samples[-1][0] < warm_up)
            if now >= next_sample or warmed:
                rss = (read_status_kib(pid, "VmRSS") or 0) / 1024
                samples.append((acked, rss))
                load.append(os.getloadavg()[0])
                next_sample = now + options.sample_seconds
                print(f"  {side}: {acked:,}/{options.jobs:,} acked, RSS {rss:.1f} MiB", flush=True)
            if sent < options.jobs and sent - acked < options.depth:
                count = min(BATCH, options.jobs - sent)
                send(sent, count)
                sent += count
                continue
            time.sleep(0.05)
        memory = pool.memory_mib()[0]
        redis_memory = int(client.info("memory")["used_memory"])
    finally:
        pool.shutdown()
        broker.close()
        delete_namespace(client, namespace)
        client.close()
    wall = time.monotonic() - started
    after_warm_up = [s for s in samples if s[0] >= options.jobs * WARM_UP_SHARE]
    return {
        "jobs": options.jobs,
        "seconds": round(wall, 1),
        "jobs_per_second": round(options.jobs / wall),
        "rss_after_warm_up_mib": round(after_warm_up[0][1], 1) if after_warm_up else None,
        "rss_end_mib": memory["rss_mib"],
        "peak_rss_mib": memory["peak_rss_mib"],
        "slope_mib_per_100k_jobs": round(_slope_per_100k(after_warm_up), 3),
        "samples": len(samples),
        "redis_used_memory_mib_at_end": round(redis_memory / 2**20, 1),
        "load_average": {"min": min(load), "max": max(load)},
    }


DATABASE_URL = (
    os.environ.get("TEST_DATABASE_URL")
    or os.environ.get("DATABASE_URL")
    or "postgresql://postgres@127.0.0.1:5432/postgres"
)
#: How long a started ``speedtier worker`` may take to consume, and to settle after that.
START_SECONDS = 90.0
SETTLE_SECONDS = 3.0


def speedtier_worker_idle(tier: str, redis_url: str, database_url: str) -> dict[str, Any]:
    """Start ``speedtier worker --tier <tier> --processes 1``; once it consumes and has
    settled, its VmRSS and PSS in MiB (None when it did not start in time)."""
    # Imported here: both soaked workers import this module (their parent's main module).
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    namespace = new_namespace(f"soak-worker-{tier}")
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ALLOW_VOLATILE_REDIS": "true",
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": Fernet.generate_key().decode(),
        "SPEEDTIER_METRICS_PORT": "0",
        "LOG_LEVEL": "INFO",
    }
    binary = str(Path(sys.executable).with_name("speedtier"))
    command = [binary, "worker", "--tier", tier, "--processes", "1", "--prefetch", "200"]
    result: dict[str, Any] = {"rss_mib": None, "pss_mib": None}
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_SECONDS
            while time.monotonic() < deadline and process.poll() is None:
                log.seek(0)
                if "worker consuming" in log.read():
                    time.sleep(SETTLE_SECONDS)
                    result["rss_mib"] = round(
                        (read_status_kib(process.pid, "VmRSS") or 0) / 1024, 1
                    )
                    result["pss_mib"] = round(_pss_kib(process.pid) / 1024, 1)
                    break
                time.sleep(0.2)
            else:
                log.seek(0)
                print(f"  speedtier worker --tier {tier} did not start:\n{log.read()[-2000:]}")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            client = connect(redis_url)
            delete_namespace(client, namespace)
            client.close()
    return result


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_soak", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--depth", type=int, default=5_000, help="jobs kept queued")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument("--database-url", default=DATABASE_URL)
    parser.add_argument(
        "--no-speedtier-worker",
        action="store_true",
        help="skip measuring the idle speedtier worker of each tier",
    )
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = {side: soak(side, options) for side in ("raw", "platform")}
    raw, platform = result["raw"], result["platform"]
    result["peak_rss_ratio"] = round(platform["peak_rss_mib"] / raw["peak_rss_mib"], 3)
    result["flat"] = {
        side: abs(result[side]["slope_mib_per_100k_jobs"]) < 1.0 for side in ("raw", "platform")
    }
    if not options.no_speedtier_worker:
        from shared.config import TIER_NAMES

        result["speedtier_worker_idle"] = {
            tier: speedtier_worker_idle(tier, options.redis_url, options.database_url)
            for tier in TIER_NAMES
        }
    write_result("memory_soak", result)
    print("| side | jobs | jobs/s | RSS warm | RSS end | peak RSS | MiB per 100k jobs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for side in ("raw", "platform"):
        row = result[side]
        print(
            f"| {side} | {row['jobs']:,} | {row['jobs_per_second']:,} | "
            f"{row['rss_after_warm_up_mib']} | {row['rss_end_mib']} | {row['peak_rss_mib']} | "
            f"{row['slope_mib_per_100k_jobs']} |"
        )
    print(f"\npeak RSS platform / raw: {result['peak_rss_ratio']} (target <= 1.1)")
    for tier, idle in result.get("speedtier_worker_idle", {}).items():
        rss, pss = idle["rss_mib"], idle["pss_mib"]
        print(f"speedtier worker --tier {tier}, idle: RSS {rss} MiB, PSS {pss} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
