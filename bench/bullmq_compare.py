"""speedtier beside BullMQ on Node, same Redis, same run: enqueues and drains.

  python -m bench.bullmq_compare            # 10,000 no-op jobs, median of 3 alternating rounds
  python -m bench.bullmq_compare --quick    # 2,000 jobs, 1 round
  python -m bench.bullmq_compare --drain-only [--jobs N] [--rounds R]   # the drains alone

BullMQ is a pinned dev-only npm dependency of the benchmark (``bench/bullmq/package.json``
and its lock file); the benchmark installs it into ``bench/bullmq/node_modules`` (git-ignored)
with ``npm ci`` when missing. Without ``node`` and ``npm`` on the PATH it is skipped with a
message. Each round measures, systems alternating:

- BullMQ: ``queue.add`` one by one, ``addBulk`` (batches of 1,000), and the drain of the jobs
  by one Worker (concurrency 50, no-op processor);
- speedtier: raw Dramatiq's ``actor.send`` one by one (the baseline of a single enqueue),
  ``Router.enqueue`` one by one, ``Router.enqueue_many`` (one call), and the drain by 2
  worker processes x 8 threads (prefetch 200, poll 100 ms) of a family without a group cap
  and of one with a cap of 5 per organization over 20 organizations.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.bullmq_report import MEASURES, summary
from bench.common import (
    REDIS_URL,
    command_calls,
    command_delta,
    commands_per_job,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    new_namespace,
    redis_cpu_seconds,
    rnd,
    write_result,
)
from bench.job_timing import drain_timing, run_spans_ms
from bench.worker_pool import WorkerPool

NAME = "bullmq_compare"
DIRECTORY = Path(__file__).with_name("bullmq")
ORGANIZATIONS = 20
DRAINS = ("drain", "drain_grouped")
SETTINGS = {"processes": 2, "threads": 8, "prefetch": 200, "poll_ms": 100}


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


def _requests(
    kind: str, jobs: int, organizations: int, params: dict[str, Any] | None = None
) -> list[Any]:
    from router.requests import JobRequest

    return [
        JobRequest(kind, 1 + i % organizations, {"item": str(i), **(params or {})})
        for i in range(jobs)
    ]


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
        _close_and_clear(broker, redis_url, namespace)
    return jobs / seconds


def raw_send(jobs: int, redis_url: str) -> float:
    """Jobs/s of raw Dramatiq's ``actor.send`` one by one (the baseline for a single
    enqueue), on its own namespace of the same Redis."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    namespace = new_namespace("cmp-raw-send")
    broker = RedisBroker(url=redis_url, namespace=namespace)  # type: ignore[no-untyped-call]
    actor = dramatiq.actor(broker=broker, actor_name="raw_noop", queue_name="raw_noop")(_noop)
    try:
        started = time.perf_counter()
        for i in range(jobs):
            actor.send(organization_id=1, item=str(i))
        seconds = time.perf_counter() - started
    finally:
        _close_and_clear(broker, redis_url, namespace)
    return jobs / seconds


def _close_and_clear(broker: Any, redis_url: str, namespace: str) -> None:
    """Close an enqueue measure's broker and delete its namespace."""
    broker.close()
    client = connect(redis_url)
    delete_namespace(client, namespace)
    client.close()


def _noop(organization_id: int, item: str) -> None:
    """Raw Dramatiq's actor: nothing (never run here)."""


def speedtier_drain(
    kind: str,
    jobs: int,
    redis_url: str,
    worker: Callable[..., None] | None = None,
    organizations: int | None = None,
    params: dict[str, Any] | None = None,
    threads: int | None = None,
) -> tuple[float, dict[str, float]]:
    """Jobs/s of 2 worker processes draining ``jobs`` enqueued before they start, and what a
    job cost: the workers' CPU and Redis's CPU (µs), Redis commands and script calls (Redis's
    figures are server-wide: other clients of the same server add to them). ``worker``: the
    worker processes' function, ``bench.families.worker_main``'s arguments (that one when
    None); ``organizations``: how many the jobs are spread over (20 for the grouped drain,
    else 1, when None); ``params``: each job's parameters besides its ``item``; ``threads``: each
    worker process's threads (8 when None)."""
    from bench.families import families, make_broker, make_router, worker_main

    if organizations is None:
        organizations = ORGANIZATIONS if kind == "bench_grouped" else 1
    family = next(f for f in families().values() if f.kind == kind)
    namespace = new_namespace(f"cmp-drain-{kind}")
    client = connect(redis_url)
    threads = threads or SETTINGS["threads"]
    args: tuple[Any, ...] = (redis_url, namespace, family.queues(), threads)
    args += (SETTINGS["prefetch"], SETTINGS["poll_ms"])
    pool = WorkerPool(worker or worker_main, args, SETTINGS["processes"], name=f"cmp-{kind}")
    try:
        pool.start()
        broker, fams = make_broker(redis_url, namespace, name="cmp-drain-enqueue")
        make_router(broker, fams).enqueue_many(_requests(kind, jobs, organizations, params))
        broker.close()
        calls_before, redis_before = command_calls(client), redis_cpu_seconds(client)
        workers_before = pool.cpu_split()
        pool.go()
        pool.wait_for(lambda: pool.total("acked") >= jobs, timeout=max(300, jobs / 20))
        seconds = max(pool.values("last_ack_at")) - min(pool.values("started_at"))
        after = pool.cpu_split()
        user, system = (now - before for now, before in zip(after, workers_before, strict=True))
        workers_cpu = user + system
        redis_cpu = redis_cpu_seconds(client) - redis_before
        calls = commands_per_job(command_delta(calls_before, command_calls(client)), jobs)
        slots = max((family.group_caps or {}).values(), default=0) * organizations
        timing = drain_timing(run_spans_ms(client, namespace), jobs / seconds, slots)
    finally:
        pool.shutdown()
        delete_namespace(client, namespace)
        client.close()
    cost = {
        "worker_cpu_us": round(workers_cpu / jobs * 1e6),
        "worker_system_cpu_us": round(system / jobs * 1e6),
        "redis_cpu_us": round(redis_cpu / jobs * 1e6),
        "commands": calls["calls_per_job"],
        "script_calls": calls["script_calls_per_job"],
        **timing,
    }
    return jobs / seconds, cost


def cpu_bound(
    rates: Mapping[str, float], costs: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """What the drains' CPU says of the grouped ratio: each drain's cores busy (worker and
    Redis CPU per job times jobs/s) and ``grouped_cpu_bound``, the ungrouped job's CPU over
    the grouped job's, which is the grouped / ungrouped ratio the drains would show if both
    kept the same cores busy (the work a group cap adds, priced in CPU)."""
    cpu = {m: costs[m]["worker_cpu_us"] + costs[m]["redis_cpu_us"] for m in DRAINS}
    return {
        "grouped_cpu_bound": rnd(cpu["drain"] / cpu["drain_grouped"], 2),
        **{f"{m}_cores_busy": rnd(rates[m] * cpu[m] / 1e6, 2) for m in DRAINS},
    }


def run(
    *,
    quick: bool = False,
    redis_url: str = REDIS_URL,
    drain_only: bool = False,
    jobs: int | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Measure every measure (or, with ``drain_only``, the two drains and BullMQ's drain)."""
    default_jobs, default_rounds = (2_000, 1) if quick else (10_000, 3)
    jobs, rounds = jobs or default_jobs, rounds or default_rounds
    measures = MEASURES[2:] if drain_only else MEASURES
    client = connect(redis_url)
    info = machine(client)
    client.close()
    missing = node_missing()
    if missing is not None:
        return {"machine": info, "skipped": missing, "targets": {}}
    ensure_bullmq()
    samples: dict[str, dict[str, list[float]]] = {
        "bullmq": {m: [] for m in measures},
        "speedtier": {m: [] for m in measures},
    }
    loads: list[float] = []
    raw_sends: list[float] = []
    costs: dict[str, list[dict[str, float]]] = {"drain": [], "drain_grouped": []}

    def bullmq_round() -> None:
        if not drain_only:
            samples["bullmq"]["single_enqueue"].append(bullmq("single", jobs, redis_url))
            samples["bullmq"]["bulk_enqueue"].append(bullmq("bulk", jobs, redis_url))
        drain = bullmq("drain", jobs, redis_url)
        samples["bullmq"]["drain"].append(drain)
        samples["bullmq"]["drain_grouped"].append(drain)  # BullMQ has no group caps (open source)

    def speedtier_round() -> None:
        side = samples["speedtier"]
        if not drain_only:
            raw_sends.append(raw_send(jobs, redis_url))
            side["single_enqueue"].append(speedtier_enqueue("single", jobs, redis_url))
            side["bulk_enqueue"].append(speedtier_enqueue("bulk", jobs, redis_url))
        for measure, kind in (("drain", "bench_noop"), ("drain_grouped", "bench_grouped")):
            rate, cost = speedtier_drain(kind, jobs, redis_url)
            side[measure].append(rate)
            costs[measure].append(cost)

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
    ratios = {m: rnd(medians["speedtier"][m] / medians["bullmq"][m], 2) for m in measures}
    drain_costs = {
        measure: {
            k: statistics.median(values)
            for k in by_round[0]
            if (values := [c[k] for c in by_round if c.get(k) is not None])
        }
        for measure, by_round in costs.items()
    }
    ratios["grouped_to_ungrouped"] = rnd(
        medians["speedtier"]["drain_grouped"] / medians["speedtier"]["drain"], 2
    )
    ratios.update(cpu_bound(medians["speedtier"], drain_costs))
    # Each round's own ratios (its two sides measured seconds apart, so a machine whose
    # speed drifts during the run moves both together).
    st, bull = samples["speedtier"], samples["bullmq"]
    by_round = {
        "drain": [s / b for s, b in zip(st["drain"], bull["drain"], strict=True)],
        "grouped_to_ungrouped": [
            g / u for g, u in zip(st["drain_grouped"], st["drain"], strict=True)
        ],
    }
    round_ratios = {k: [rnd(min(v), 2), rnd(max(v), 2)] for k, v in by_round.items()}
    raw = {"raw_dramatiq_send": round(statistics.median(raw_sends))} if raw_sends else {}
    if raw:
        ratios["single_to_raw_send"] = rnd(
            medians["speedtier"]["single_enqueue"] / raw["raw_dramatiq_send"], 2
        )
    return {
        "machine": info,
        "bullmq_version": json.loads((DIRECTORY / "package.json").read_text())["devDependencies"][
            "bullmq"
        ],
        "settings": {"jobs": jobs, "rounds": rounds, **SETTINGS, "organizations": ORGANIZATIONS},
        "samples": samples,
        "medians": medians,
        **raw,
        "ratios": ratios,
        "round_ratio_ranges": round_ratios,
        "drain_costs_per_job": drain_costs,
        "load_averages": loads,
        "targets": {
            "drain_met": ratios["drain"] >= 1.0,
            "grouped_met": ratios["grouped_to_ungrouped"] >= 0.8,
            **(
                {}
                if drain_only
                else {
                    "bulk_met": ratios["bulk_enqueue"] >= 1.0,
                    "single_met": ratios["single_to_raw_send"] >= 1.0,
                }
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bullmq_compare", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, one round")
    parser.add_argument("--drain-only", action="store_true", help="only the drains")
    parser.add_argument("--jobs", type=int, help="jobs per measure (default 10,000; quick 2,000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 3; quick 1)")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url or REDIS_URL,
        drain_only=options.drain_only,
        jobs=options.jobs,
        rounds=options.rounds,
    )
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
