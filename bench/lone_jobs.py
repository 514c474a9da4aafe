"""What a job costs the workers when it arrives alone, against a drained job
(``python -m bench.lone_jobs``).

A drain's no-op jobs share their fetches, their settles' round trips and their threads'
wake-ups: a job costs the workers about a tenth of a millisecond of CPU. A job that arrives
alone (its organization's group admits one at a time, and the organizations are fewer than
the threads, as an ingestion backlog's documents) pays for its own: a fetch, a start and a
settle sent by a sender thread woken for it, a worker thread woken for it. Each round drains
``--jobs`` no-op jobs of a family without a cap (``bench_noop``) and ``--lone-jobs`` of a
family capped at one per organization over ``--organizations`` (``bench_lone``), in
``bench.bullmq_compare``'s drain (2 processes x 8 threads, prefetch 200, poll 100 ms), the
order alternating; it reports each one's worker CPU a job, the kernel's part of it (system
calls, thread wake-ups) apart, Redis's CPU, commands and script calls a job, and the lone
job's worker CPU over the drained one's.

With ``--burn-ms N`` each lone job spends N ms of its thread's CPU in Python
(``bench.families.burn``, as an ingestion pass spends its CPU) and the report gives what a job
costs the workers beyond that: its own middleware, fetch, start and settle, and the share of
the worker's other threads (consumers, settle sender, queue watch, dead-worker check) that
falls to each job while the jobs keep a process's interpreter busy. ``--threads N`` sets each
worker process's threads (8 by default). With ``--by-thread`` the lone jobs' worker processes
also sample each of their threads (``bench.thread_split``): the report adds each kind of
thread's CPU and context switches a lone job, medians of the rounds. Results:
``bench/results/lone_jobs.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from bench import thread_split
from bench.bullmq_compare import SETTINGS, speedtier_drain
from bench.common import REDIS_URL, RESULTS_DIR
from testkit import thread_counts

MEASURES = ("drained", "lone")
KEYS = ("worker_cpu_us", "worker_system_cpu_us", "redis_cpu_us", "commands", "script_calls")


def measure(
    name: str,
    jobs: int,
    lone_jobs: int,
    organizations: int,
    burn_ms: float,
    redis_url: str,
    threads: int | None = None,
    by_thread: bool = False,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """One measure's row, and (``by_thread``, lone jobs only) its threads' split a job."""
    if name == "drained":
        rate, cost = speedtier_drain("bench_noop", jobs, redis_url, threads=threads)
        return {"jobs_per_second": rate, **{key: cost[key] for key in KEYS}}, {}
    worker = None
    if by_thread:
        thread_split.clear()
        worker = thread_split.split_worker_main
    kind, params = ("bench_burn", {"sleep": burn_ms / 1000}) if burn_ms else ("bench_lone", None)
    rate, cost = speedtier_drain(
        kind, lone_jobs, redis_url, worker, organizations, params, threads=threads
    )
    split = thread_split.measured() if by_thread else {}
    return {"jobs_per_second": rate, **{key: cost[key] for key in KEYS}}, split


def run(
    rounds: int,
    jobs: int,
    lone_jobs: int,
    organizations: int,
    redis_url: str,
    burn_ms: float = 0.0,
    threads: int | None = None,
    by_thread: bool = False,
) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in MEASURES}
    splits: list[dict[str, dict[str, float]]] = []
    for number in range(rounds):
        order = MEASURES if number % 2 == 0 else MEASURES[::-1]
        for name in order:
            row, split = measure(
                name, jobs, lone_jobs, organizations, burn_ms, redis_url, threads, by_thread
            )
            samples[name].append(row)
            if split:
                splits.append(split)
        print(f"<!-- round {number + 1} of {rounds} done -->", file=sys.stderr, flush=True)
    medians = {
        name: {key: round(statistics.median(s[key] for s in rows), 2) for key in rows[0]}
        for name, rows in samples.items()
    }
    burn_us = burn_ms * 1000
    ratios = [
        (lone["worker_cpu_us"] - burn_us) / drained["worker_cpu_us"]
        for drained, lone in zip(samples["drained"], samples["lone"], strict=True)
    ]
    medians["lone"]["beyond_the_burn_us"] = round(medians["lone"]["worker_cpu_us"] - burn_us, 2)
    return {
        "settings": {
            "jobs": jobs,
            "lone_jobs": lone_jobs,
            "organizations": organizations,
            "burn_ms": burn_ms,
            "threads": threads or SETTINGS["threads"],
            "by_thread": by_thread,
        },
        "by_thread": thread_counts.medians(splits) if splits else {},
        "medians": medians,
        "lone_over_drained_cpu": {
            "median": round(statistics.median(ratios), 2),
            "rounds": [round(r, 2) for r in ratios],
        },
        "samples": samples,
    }


def report(result: dict[str, Any]) -> str:
    settings, medians = result["settings"], result["medians"]
    lines = [
        "### A lone job against a drained one",
        "",
        f"Drained: {settings['jobs']:,} no-op jobs, no cap. Lone: {settings['lone_jobs']:,} "
        f"jobs over {settings['organizations']} organizations, one at a time each, "
        + (f"each spending {settings['burn_ms']:g} ms of CPU" if settings["burn_ms"] else "no-op")
        + ". Medians of the rounds.",
        "",
        "| jobs | jobs/s | worker CPU µs a job | of it the kernel's | Redis CPU µs a job "
        "| commands | script calls |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in MEASURES:
        row = medians[name]
        lines.append(
            f"| {name} | {row['jobs_per_second']:,.0f} | {row['worker_cpu_us']:g} | "
            f"{row['worker_system_cpu_us']:g} | {row['redis_cpu_us']:g} | {row['commands']:g} | "
            f"{row['script_calls']:g} |"
        )
    ratio = result["lone_over_drained_cpu"]
    beyond = medians["lone"]["beyond_the_burn_us"]
    lines += [
        "",
        f"A lone job's worker CPU beyond its own work: **{beyond:g} µs**, "
        f"**{ratio['median']}x** a drained job's (rounds {ratio['rounds']}).",
    ]
    if settings.get("by_thread") and not result["by_thread"]:
        lines += ["", "By thread: no worker process ran long enough for two samples (more jobs)."]
    if result["by_thread"]:
        lines += [
            "",
            f"By thread ({settings['threads']} worker threads a process), a lone job, "
            "medians of the rounds (the sampler's own thread, `probe`, is part of the lone "
            "jobs' worker CPU above):",
            "",
            "| thread | CPU µs | of it the kernel's | voluntary switches | involuntary |",
            "|---|---:|---:|---:|---:|",
        ]
        for kind, row in result["by_thread"].items():
            lines.append(
                f"| {kind} | {row['cpu_us']:g} | {row['system_cpu_us']:g} | "
                f"{row['voluntary_switches']:g} | {row['involuntary_switches']:g} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lone_jobs", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000, help="drained jobs a round")
    parser.add_argument("--lone-jobs", type=int, default=4_000, help="lone jobs a round")
    parser.add_argument("--organizations", type=int, default=4)
    parser.add_argument(
        "--burn-ms", type=float, default=0.0, help="CPU each lone job spends (default: none)"
    )
    parser.add_argument("--threads", type=int, help="threads a worker process (default 8)")
    parser.add_argument(
        "--by-thread", action="store_true", help="split the lone jobs' worker CPU by thread"
    )
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    result = run(
        options.rounds,
        options.jobs,
        options.lone_jobs,
        options.organizations,
        options.redis_url or REDIS_URL,
        options.burn_ms,
        options.threads,
        options.by_thread,
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "lone_jobs.json").write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
