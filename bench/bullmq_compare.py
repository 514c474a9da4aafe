"""speedtier beside BullMQ on Node (issue 16, targets 1 and 2), same Redis, same run.

  python -m bench.bullmq_compare            # 10,000 no-op jobs, median of 3 alternating rounds
  python -m bench.bullmq_compare --quick    # 2,000 jobs, 1 round

BullMQ is a pinned dev-only npm dependency of the benchmark (``bench/bullmq/package.json``
and its lock file); the benchmark installs it into ``bench/bullmq/node_modules`` (git-ignored)
with ``npm ci`` when missing. Without ``node`` and ``npm`` on the PATH it is skipped with a
message. Each round measures, systems alternating:

- BullMQ: ``queue.add`` one by one, ``addBulk`` (batches of 1,000), and the drain of the jobs
  by one Worker (concurrency 50, no-op processor);
- speedtier: ``Router.enqueue`` one by one, ``Router.enqueue_many`` (one call), and the
  drain by 2 worker processes x 8 threads (prefetch 200, poll 100 ms) of a family without a
  group cap and of one with a cap of 5 per organization over 20 organizations.

Ratios are speedtier / BullMQ (above 1: speedtier faster); the median of the rounds is shown
with the load average at each measure (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REDIS_URL,
    WorkerPool,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    markdown_table,
    new_namespace,
    rnd,
    write_result,
)

NAME = "bullmq_compare"
DIRECTORY = Path(__file__).with_name("bullmq")
ORGANIZATIONS = 20
SETTINGS = {"processes": 2, "threads": 8, "prefetch": 200, "poll_ms": 100}
MEASURES = (
    "single_enqueue",
    "bulk_enqueue",
    "drain",
    "drain_grouped",
)


def node_missing() -> str | None:
    """Why BullMQ cannot run here, or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on the PATH: the BullMQ baseline is skipped"
    return None


def ensure_bullmq() -> None:
    """``npm ci`` into bench/bullmq/node_modules when BullMQ is not installed there."""
    if (DIRECTORY / "node_modules" / "bullmq" / "package.json").exists():
        return
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=DIRECTORY,
        check=True,
        timeout=600,
    )


def bullmq(mode: str, jobs: int, redis_url: str) -> float:
    """Jobs/s of one BullMQ measure (a fresh queue, obliterated afterwards)."""
    queue = new_namespace("bullmq")
    completed = subprocess.run(
        ["node", "run.mjs", mode, str(jobs), redis_url, queue],
        cwd=DIRECTORY,
        check=True,
        capture_output=True,
        text=True,
        timeout=max(300, jobs / 20),
    )
    rate: float = json.loads(completed.stdout.strip().splitlines()[-1])["jobs_per_second"]
    return rate


def _requests(kind: str, jobs: int, organizations: int) -> list[Any]:
    from router.requests import JobRequest

    return [JobRequest(kind, 1 + i % organizations, {"item": str(i)}) for i in range(jobs)]


def speedtier_enqueue(mode: str, jobs: int, redis_url: str) -> float:
    """Jobs/s of ``Router.enqueue`` one by one (single) or one ``enqueue_many`` (bulk)."""
    from bench.families import make_broker, make_router

    namespace = new_namespace(f"cmp-{mode}")
    broker, fams = make_broker(redis_url, namespace, name="cmp-enqueue")
    router = make_router(broker, fams)
    requests = _requests("bench_noop", jobs, 1)
    try:
        started = time.perf_counter()
        if mode == "single":
            for request in requests:
                router.enqueue(request)
        else:
            router.enqueue_many(requests)
        seconds = time.perf_counter() - started
    finally:
        broker.close()
        client = connect(redis_url)
        delete_namespace(client, namespace)
        client.close()
    return jobs / seconds


def speedtier_drain(kind: str, jobs: int, redis_url: str) -> float:
    """Jobs/s of 2 worker processes draining ``jobs`` enqueued before they start."""
    from bench.families import families, make_broker, make_router, worker_main

    organizations = ORGANIZATIONS if kind == "bench_grouped" else 1
    family = next(f for f in families().values() if f.kind == kind)
    namespace = new_namespace(f"cmp-drain-{kind}")
    client = connect(redis_url)
    args = (redis_url, namespace, family.queues(), SETTINGS["threads"])
    args += (SETTINGS["prefetch"], SETTINGS["poll_ms"])
    pool = WorkerPool(worker_main, args, SETTINGS["processes"], name=f"cmp-{kind}")
    try:
        pool.start()
        broker, fams = make_broker(redis_url, namespace, name="cmp-drain-enqueue")
        make_router(broker, fams).enqueue_many(_requests(kind, jobs, organizations))
        broker.close()
        pool.go()
        pool.wait_for(lambda: pool.total("acked") >= jobs, timeout=max(300, jobs / 20))
        seconds = max(pool.values("last_ack_at")) - min(pool.values("started_at"))
    finally:
        pool.shutdown()
        delete_namespace(client, namespace)
        client.close()
    return jobs / seconds


def run(*, quick: bool = False, redis_url: str = REDIS_URL) -> dict[str, Any]:
    jobs, rounds = (2_000, 1) if quick else (10_000, 3)
    client = connect(redis_url)
    info = machine(client)
    client.close()
    missing = node_missing()
    if missing is not None:
        return {"machine": info, "skipped": missing, "targets": {}}
    ensure_bullmq()
    samples: dict[str, dict[str, list[float]]] = {
        "bullmq": {m: [] for m in MEASURES},
        "speedtier": {m: [] for m in MEASURES},
    }
    loads: list[float] = []

    def bullmq_round() -> None:
        samples["bullmq"]["single_enqueue"].append(bullmq("single", jobs, redis_url))
        samples["bullmq"]["bulk_enqueue"].append(bullmq("bulk", jobs, redis_url))
        drain = bullmq("drain", jobs, redis_url)
        samples["bullmq"]["drain"].append(drain)
        samples["bullmq"]["drain_grouped"].append(drain)  # BullMQ has no group caps (open source)

    def speedtier_round() -> None:
        side = samples["speedtier"]
        side["single_enqueue"].append(speedtier_enqueue("single", jobs, redis_url))
        side["bulk_enqueue"].append(speedtier_enqueue("bulk", jobs, redis_url))
        side["drain"].append(speedtier_drain("bench_noop", jobs, redis_url))
        side["drain_grouped"].append(speedtier_drain("bench_grouped", jobs, redis_url))

    for number in range(rounds):
        order = (
            (bullmq_round, speedtier_round) if number % 2 == 0 else (speedtier_round, bullmq_round)
        )
        for measure in order:
            loads.append(rnd(os.getloadavg()[0], 2))
            measure()
        print(f"<!-- round {number + 1} of {rounds} done -->", file=sys.stderr, flush=True)
    medians = {
        system: {m: round(statistics.median(values)) for m, values in by_measure.items()}
        for system, by_measure in samples.items()
    }
    ratios = {m: rnd(medians["speedtier"][m] / medians["bullmq"][m], 2) for m in MEASURES}
    ratios["grouped_to_ungrouped"] = rnd(
        medians["speedtier"]["drain_grouped"] / medians["speedtier"]["drain"], 2
    )
    return {
        "machine": info,
        "bullmq_version": json.loads((DIRECTORY / "package.json").read_text())["devDependencies"][
            "bullmq"
        ],
        "settings": {"jobs": jobs, "rounds": rounds, **SETTINGS, "organizations": ORGANIZATIONS},
        "samples": samples,
        "medians": medians,
        "ratios": ratios,
        "load_averages": loads,
        "targets": {
            "drain_met": ratios["drain"] >= 1.0,
            "grouped_met": ratios["grouped_to_ungrouped"] >= 0.8,
            "bulk_met": ratios["bulk_enqueue"] >= 1.0,
        },
    }


def summary(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"### speedtier beside BullMQ\n\nSkipped: {result['skipped']}."
    medians, ratios = result["medians"], result["ratios"]
    labels = {
        "single_enqueue": "enqueue one by one",
        "bulk_enqueue": "bulk enqueue (addBulk / enqueue_many)",
        "drain": "drain, no group cap",
        "drain_grouped": "drain, cap 5 per organization, 20 organizations (BullMQ: no cap)",
    }
    rows = [
        [labels[m], f"{medians['bullmq'][m]:,}", f"{medians['speedtier'][m]:,}", ratios[m]]
        for m in MEASURES
    ]
    settings = result["settings"]
    return "\n".join(
        [
            "### speedtier beside BullMQ",
            "",
            f"{settings['jobs']:,} no-op jobs, median of {settings['rounds']} alternating "
            f"rounds, BullMQ {result['bullmq_version']} (one Worker, concurrency 50), speedtier "
            f"{settings['processes']} processes x {settings['threads']} threads; jobs/s. "
            f"Load average at each measure: {result['load_averages']}.",
            "",
            markdown_table(["measure", "BullMQ", "speedtier", "speedtier / BullMQ"], rows),
            "",
            f"Grouped drain / ungrouped drain: {ratios['grouped_to_ungrouped']} (target >= 0.8).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bullmq_compare", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, one round")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(quick=options.quick, redis_url=options.redis_url or REDIS_URL)
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
