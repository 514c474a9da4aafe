"""Fairness under a backlog: one organization's 10,000 jobs (or a backlog spread over
``--busy-orgs`` organizations) must not hold back 20 other organizations' single jobs.

  python -m bench.fairness                          # 1 busy organization, 10,000 jobs
  python -m bench.fairness --busy-orgs 1000 --backlog 20000
  python -m bench.fairness --sweep [--rounds 5]     # 1, 50, 1,000, 10,000 busy organizations

The family (``b_fair``) caps each organization at 2 running jobs in the fast tier
(``Family(group_caps={"fast": 2})``); each job sleeps 20 ms. With the workers running:

1. idle: 20 small organizations enqueue one job each on an idle system; their waits
   (enqueue -> handler start) are the reference;
2. backlog: organization A enqueues 10,000 jobs (with ``busy_orgs`` above 1: the backlog
   interleaved over that many organizations, job i to organization i mod N), then the 20
   small organizations enqueue one job each again. The run stops once every small job has
   run, plus a short tail; the backlog is not drained.

Reported: the small organizations' p50/p95 wait in both phases and their ratio, how many of
A's jobs started before the last small job started, and fetches per job: messages handed to a
worker thread (every delivery, including ones parked at claim or dropped as stale) divided
by runs completed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import (
    REDIS_URL,
    TraceReader,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    log_note,
    machine,
    markdown_table,
    new_namespace,
    percentile,
    rnd,
    verdict,
    write_result,
)
from bench.worker_pool import WorkerPool

QUEUE = "b_fair.fast"
KIND = "bench_fair"
BIG_ORG = 1
#: Busy organizations beyond the first are numbered from here (clear of SMALL_ORGS).
BUSY_ORG_BASE = 1_000
SMALL_ORGS = list(range(101, 121))

#: Worker settings: the fast tier's default shape, Dramatiq's default prefetch (threads * 2,
#: ``prefetch=0``), and a 100 ms poll so an idle worker notices new work within 0.1 s.
DEFAULTS: dict[str, Any] = {
    "backlog": 10_000,
    "busy_orgs": 1,
    "job_seconds": 0.02,
    "processes": 2,
    "threads": 8,
    "prefetch": 0,
    "poll_ms": 100,
    "idle_seconds": 1.5,
    "tail_seconds": 1.0,
}
QUICK_BACKLOG = 1_000
#: The small organizations' p95 wait under the backlog, at most this times their idle one.
RATIO_TARGET = 1.5
#: Deliveries to worker threads per completed run, at most.
FETCHES_TARGET = 1.05
#: ``--sweep``: busy organizations -> the backlog spread over them.
SWEEP = {1: 10_000, 50: 10_000, 1_000: 20_000, 10_000: 100_000}


def _small_jobs(router: Any, phase: str, job_seconds: float) -> dict[str, float]:
    """Each small organization enqueues its own job; returns item -> enqueue time."""
    from router.requests import JobRequest

    enqueued = {}
    for org in SMALL_ORGS:
        item = f"{phase}-{org}"
        enqueued[item] = time.time()
        router.enqueue(JobRequest(KIND, org, {"item": item, "sleep": job_seconds}))
    return enqueued


def _wait_for_ends(reader: TraceReader, items: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len({e["item"] for e in reader.of("end", items)}) < len(items):
        if time.monotonic() > deadline:
            raise TimeoutError(f"small jobs did not finish within {timeout:.0f}s")
        time.sleep(0.02)
        reader.poll()


def _waits(reader: TraceReader, enqueued: dict[str, float]) -> dict[str, float]:
    starts = {e["item"]: e["t"] for e in reader.of("start", set(enqueued))}
    return {item: starts[item] - enqueued[item] for item in enqueued}


def _longest_wait(reader: TraceReader, waits: dict[str, float]) -> dict[str, Any]:
    """The longest of ``waits``, split where the fetch that claimed it was sent: before, in
    Redis (its enqueue included); after, in a worker (the fetch's round trip, the wait for a
    thread), with the process that ran it."""
    item = max(waits, key=lambda name: waits[name])
    start = next(e for e in reader.of("start", {item}))
    in_worker = start.get("in_worker")
    return {
        "item": item,
        "wait_ms": rnd(waits[item] * 1000, 1),
        "in_worker_ms": None if in_worker is None else rnd(in_worker * 1000, 1),
        "in_redis_ms": None if in_worker is None else rnd((waits[item] - in_worker) * 1000, 1),
        "pid": start.get("pid"),
    }


def _stats(waits: dict[str, float]) -> dict[str, float]:
    values = list(waits.values())
    return {
        "p50_ms": rnd(percentile(values, 50) * 1000, 1),
        "p95_ms": rnd(percentile(values, 95) * 1000, 1),
        "max_ms": rnd(max(values) * 1000, 1),
    }


def run(*, quick: bool = False, redis_url: str = REDIS_URL, **overrides: Any) -> dict[str, Any]:
    from bench.families import make_broker, make_router, worker_main
    from router.requests import JobRequest

    settings = dict(DEFAULTS)
    if quick:
        settings["backlog"] = QUICK_BACKLOG
    settings.update({k: v for k, v in overrides.items() if v is not None})
    namespace = new_namespace("fair")
    client = connect(redis_url)
    info = machine(client)
    broker, fams = make_broker(redis_url, namespace, name="fair-enqueue")
    router = make_router(broker, fams)
    reader = TraceReader(client, namespace)
    pool = WorkerPool(
        worker_main,
        (
            redis_url,
            namespace,
            [QUEUE],
            settings["threads"],
            settings["prefetch"],
            settings["poll_ms"],
        ),
        settings["processes"],
        name="fairness",
    )
    job_seconds = settings["job_seconds"]
    try:
        pool.start()
        pool.go()
        time.sleep(settings["idle_seconds"])  # let the idle workers back off to their poll

        # 1. idle: the 20 small jobs alone
        idle = _small_jobs(router, "idle", job_seconds)
        _wait_for_ends(reader, set(idle), timeout=30)
        before_backlog = pool.counters()

        # 2. backlog: A's jobs, then the 20 small jobs again
        busy = [BIG_ORG] + [BUSY_ORG_BASE + n for n in range(1, settings["busy_orgs"])]
        big = [
            JobRequest(KIND, busy[i % len(busy)], {"item": f"a-{i}", "sleep": job_seconds})
            for i in range(settings["backlog"])
        ]
        started = time.perf_counter()
        answers = router.enqueue_many(big)
        big_enqueue_seconds = time.perf_counter() - started
        loaded = _small_jobs(router, "load", job_seconds)
        _wait_for_ends(reader, set(loaded), timeout=60)
        time.sleep(settings["tail_seconds"])
        pool.shutdown()  # drains in-flight runs, so every delivery counted has its outcome
        reader.poll()
        after = pool.counters()
        admitted, parked = broker.jobs.group_state(f"{QUEUE}|{BIG_ORG}")
    finally:
        pool.shutdown()
        broker.close()
        delete_namespace(client, namespace)
        client.close()

    idle_waits, load_waits = _waits(reader, idle), _waits(reader, loaded)
    idle_stats, load_stats = _stats(idle_waits), _stats(load_waits)
    load_starts = {e["item"]: e["t"] for e in reader.of("start", set(loaded))}
    last_small_start = max(load_starts.values())
    first_small_enqueue = min(loaded.values())
    busy_orgs = set(busy)
    big_starts = [e["t"] for e in reader.events if e["ev"] == "start" and e["org"] in busy_orgs]
    delivered = after["delivered"] - before_backlog["delivered"]
    completed = after["completed"] - before_backlog["completed"]
    ratio = load_stats["p95_ms"] / idle_stats["p95_ms"]
    fetches_per_job = delivered / completed
    return {
        "benchmark": "fairness",
        "quick": quick,
        "machine": info,
        "settings": settings,
        "big_org": {
            "jobs_enqueued": settings["backlog"],
            "added": sum(1 for a in answers if a.outcome == "added"),
            "enqueue_seconds": rnd(big_enqueue_seconds),
            "started_before_last_small_start": sum(1 for t in big_starts if t <= last_small_start),
            "started_while_small_waited": sum(
                1 for t in big_starts if first_small_enqueue <= t <= last_small_start
            ),
            "started_by_end": len(big_starts),
            "group_admitted_at_end": admitted,
            "group_parked_at_end": parked,
        },
        "small_idle": idle_stats,
        "small_under_backlog": load_stats,
        "p95_ratio": rnd(ratio, 2),
        "longest_wait_under_backlog": _longest_wait(reader, load_waits),
        "waits_ms": {
            "idle": {k: rnd(v * 1000, 1) for k, v in idle_waits.items()},
            "under_backlog": {k: rnd(v * 1000, 1) for k, v in load_waits.items()},
        },
        "backlog_phase_counters": {k: after[k] - before_backlog[k] for k in after},
        "fetches_per_job": rnd(fetches_per_job),
        "worker_logs": pool.log_summary(),
        "targets": {
            "p95_ratio_at_most": RATIO_TARGET,
            "p95_ratio_met": ratio <= RATIO_TARGET,
            "fetches_per_job_at_most": FETCHES_TARGET,
            "fetches_per_job_met": fetches_per_job <= FETCHES_TARGET,
        },
    }


def summary(result: dict[str, Any]) -> str:
    s, idle, load, big = (
        result["settings"],
        result["small_idle"],
        result["small_under_backlog"],
        result["big_org"],
    )
    targets, counters = result["targets"], result["backlog_phase_counters"]
    table = markdown_table(
        ["", "p50 wait", "p95 wait", "max wait"],
        [
            ["20 small orgs, idle system", f"{idle['p50_ms']} ms", f"{idle['p95_ms']} ms",
             f"{idle['max_ms']} ms"],
            [f"20 small orgs behind {big['jobs_enqueued']:,} jobs of "
             f"{s['busy_orgs']:,} busy org(s)",
             f"{load['p50_ms']} ms",
             f"{load['p95_ms']} ms", f"{load['max_ms']} ms"],
            ["backlog / idle", "", f"**{result['p95_ratio']}x** (target <= {RATIO_TARGET}x: "
             f"{verdict(targets['p95_ratio_met'])})", ""],
        ],
    )  # fmt: skip
    notes = [
        f"Fetches per job (backlog phase): **{result['fetches_per_job']}** "
        f"({int(counters['delivered']):,} deliveries to worker threads, "
        f"{int(counters['completed']):,} runs, {int(counters['skipped'])} parked/stale at "
        f"claim; target <= {FETCHES_TARGET}: {verdict(targets['fetches_per_job_met'])}).",
        f"Busy organizations' jobs started before the last small job started: "
        f"{big['started_before_last_small_start']:,} "
        f"({big['started_while_small_waited']} of them while small jobs waited); "
        f"A's (the first busy organization's) group at the end: "
        f"{big['group_admitted_at_end']} admitted, "
        f"{big['group_parked_at_end']:,} parked.",
        f"Group cap 2 per organization, {s['job_seconds'] * 1000:.0f} ms jobs; "
        f"{s['processes']} worker processes x {s['threads']} threads, "
        f"prefetch {s['prefetch'] or 'Dramatiq default (threads x 2)'}, poll {s['poll_ms']} ms.",
    ]
    logs = log_note(result["worker_logs"])
    if logs:
        notes.append(logs)
    return "### Fairness\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def sweep(*, rounds: int, redis_url: str = REDIS_URL) -> dict[str, Any]:
    """Every size of :data:`SWEEP`, one run each per round, the sizes interleaved within
    each round; per size the median and spread of the p95 ratio and of fetches per job."""
    runs: dict[int, list[dict[str, Any]]] = {size: [] for size in SWEEP}
    for _ in range(rounds):
        for size, backlog in SWEEP.items():
            runs[size].append(run(redis_url=redis_url, busy_orgs=size, backlog=backlog))
    sizes = []
    for size, results in runs.items():
        ratios = sorted(r["p95_ratio"] for r in results)
        fetches = sorted(r["fetches_per_job"] for r in results)
        sizes.append(
            {
                "busy_orgs": size,
                "backlog": SWEEP[size],
                "idle_p95_ms": statistics.median(r["small_idle"]["p95_ms"] for r in results),
                "load_p95_ms": statistics.median(
                    r["small_under_backlog"]["p95_ms"] for r in results
                ),
                "p95_ratio_median": statistics.median(ratios),
                "p95_ratio_range": [ratios[0], ratios[-1]],
                "fetches_per_job_median": statistics.median(fetches),
                "met": statistics.median(ratios) <= RATIO_TARGET
                and statistics.median(fetches) <= FETCHES_TARGET,
            }
        )
    return {"benchmark": "fairness_sweep", "rounds": rounds, "sizes": sizes}


def sweep_summary(result: dict[str, Any]) -> str:
    rows = [
        [f"{s['busy_orgs']:,} x {s['backlog'] // s['busy_orgs']:,}", f"{s['idle_p95_ms']} ms",
         f"{s['load_p95_ms']} ms",
         f"**{s['p95_ratio_median']}x** ({s['p95_ratio_range'][0]}-{s['p95_ratio_range'][1]})",
         str(s["fetches_per_job_median"]), verdict(s["met"])]
        for s in result["sizes"]
    ]  # fmt: skip
    table = markdown_table(
        ["busy orgs x jobs each", "idle p95", "p95 under backlog", "ratio (range)",
         "fetches/job", f"<= {RATIO_TARGET}x"],
        rows,
    )  # fmt: skip
    return (
        f"### Fairness at 1 to 10,000 busy organizations ({result['rounds']} rounds, "
        "medians)\n\n" + table + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int)
    parser.add_argument(
        "--busy-orgs", type=int, help="organizations the backlog is interleaved over (1)"
    )
    parser.add_argument("--processes", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--prefetch", type=int)
    parser.add_argument("--poll-ms", type=int)
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="1, 50, 1,000 and 10,000 busy organizations, --rounds rounds, sizes interleaved",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --sweep (5)")
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    if options.sweep:
        swept = sweep(rounds=options.rounds, redis_url=options.redis_url)
        print(sweep_summary(swept))
        print(f"(results: {write_result('fairness_sweep', swept)})")
        return
    result = run(
        quick=options.quick,
        redis_url=options.redis_url,
        backlog=options.backlog,
        busy_orgs=options.busy_orgs,
        processes=options.processes,
        threads=options.threads,
        prefetch=options.prefetch,
        poll_ms=options.poll_ms,
    )
    path = write_result("fairness", result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
