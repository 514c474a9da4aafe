"""Fair by cost: 20 organizations all backlogged, one of them with jobs ten times longer;
each organization's share of busy worker time over the run, against an equal share.

  python -m bench.fair_share              # 5 rounds
  python -m bench.fair_share --rounds 1 --seconds 8

The family (``b_share``) caps each organization at 16 running jobs in the fast tier, as many
as the pool's threads (2 processes x 8): the cap never decides the share, the fair order
does. Organization 1's jobs sleep ``heavy_factor`` (10) times as long as the others' (10 ms).
Each organization enqueues enough jobs to stay backlogged through the measured window (from
``warmup_seconds`` after the workers start to ``seconds`` later). Busy time is each run's
overlap with the window, from the handlers' start and end stamps.

Reported per round: the heavy organization's share and the others' (min, max), each against
an equal share (1/20), and the largest deviation; the target is every organization within
+-20% of an equal share. For reference, round robin by count would give the heavy
organization 10/29 of the time (6.9x an equal share).
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
    machine,
    markdown_table,
    new_namespace,
    rnd,
    verdict,
    write_result,
)
from bench.worker_pool import WorkerPool

QUEUE = "b_share.fast"
KIND = "bench_share"
HEAVY_ORG = 1
DEFAULTS: dict[str, Any] = {
    "orgs": 20,
    "job_seconds": 0.01,
    "heavy_factor": 10.0,
    "processes": 2,
    "threads": 8,
    "prefetch": 0,
    "poll_ms": 100,
    "warmup_seconds": 2.0,
    "seconds": 10.0,
}
#: Every organization's share must stay within this of an equal one.
TOLERANCE = 0.20


def _backlog(settings: dict[str, Any]) -> list[Any]:
    """Enough jobs per organization to stay busy through the window even with every worker
    thread (twice what an equal share needs: the heavy one may get more than its share
    under a wrong order, the others less), interleaved over the organizations."""
    from router.requests import JobRequest

    threads = settings["processes"] * settings["threads"]
    span = settings["warmup_seconds"] + settings["seconds"]
    short = settings["job_seconds"]
    heavy = short * settings["heavy_factor"]
    per_org = {
        org: int(2 * threads * span / (heavy if org == HEAVY_ORG else short) / settings["orgs"])
        + 50
        for org in range(1, settings["orgs"] + 1)
    }
    jobs = []
    for i in range(max(per_org.values())):
        for org, count in per_org.items():
            if i < count:
                sleep = heavy if org == HEAVY_ORG else short
                jobs.append(JobRequest(KIND, org, {"item": f"{org}-{i}", "sleep": sleep}))
    return jobs


def _shares(events: list[dict[str, Any]], start: float, end: float) -> dict[int, float]:
    """Organization -> its share of the busy worker time inside [start, end]."""
    opened: dict[str, tuple[int, float]] = {}
    busy: dict[int, float] = {}
    for event in events:
        if event["ev"] == "start":
            opened[event["item"]] = (event["org"], event["t"])
        elif event["ev"] == "end" and event["item"] in opened:
            org, began = opened.pop(event["item"])
            overlap = min(end, event["t"]) - max(start, began)
            if overlap > 0:
                busy[org] = busy.get(org, 0.0) + overlap
    total = sum(busy.values())
    return {org: value / total for org, value in busy.items()} if total else {}


def one_round(settings: dict[str, Any], redis_url: str) -> dict[str, Any]:
    from bench.families import make_broker, make_router, worker_main

    namespace = new_namespace("share")
    client = connect(redis_url)
    broker, fams = make_broker(redis_url, namespace, name="share-enqueue")
    router = make_router(broker, fams)
    reader = TraceReader(client, namespace)
    pool = WorkerPool(
        worker_main,
        (redis_url, namespace, [QUEUE], settings["threads"], settings["prefetch"],
         settings["poll_ms"]),
        settings["processes"],
        name="fair-share",
    )  # fmt: skip
    try:
        router.enqueue_many(_backlog(settings))
        pool.start()
        began = pool.go()
        window = (began + settings["warmup_seconds"], began + settings["warmup_seconds"]
                  + settings["seconds"])  # fmt: skip
        time.sleep(max(0.0, window[1] - time.time()) + 0.5)
        pool.shutdown()
        reader.poll()
    finally:
        pool.shutdown()
        broker.close()
        delete_namespace(client, namespace)
        client.close()
    shares = _shares(reader.events, *window)
    equal = 1 / settings["orgs"]
    others = [shares.get(org, 0.0) / equal for org in range(2, settings["orgs"] + 1)]
    heavy = shares.get(HEAVY_ORG, 0.0) / equal
    return {
        "heavy_vs_equal": rnd(heavy, 3),
        "others_min_vs_equal": rnd(min(others), 3),
        "others_max_vs_equal": rnd(max(others), 3),
        "largest_deviation": rnd(max(abs(x - 1) for x in [heavy, *others]), 3),
    }


def run(
    *, rounds: int = 5, quick: bool = False, redis_url: str = REDIS_URL, **overrides: Any
) -> dict[str, Any]:
    settings = dict(DEFAULTS)
    if quick:
        rounds, settings["seconds"] = 1, 4.0
    settings.update({k: v for k, v in overrides.items() if v is not None})
    client = connect(redis_url)
    info = machine(client)
    client.close()
    results = [one_round(settings, redis_url) for _ in range(rounds)]
    deviation = statistics.median(r["largest_deviation"] for r in results)
    return {
        "benchmark": "fair_share",
        "machine": info,
        "settings": settings,
        "rounds": results,
        "median_largest_deviation": rnd(deviation, 3),
        "targets": {"deviation_at_most": TOLERANCE, "deviation_met": deviation <= TOLERANCE},
    }


def summary(result: dict[str, Any]) -> str:
    s = result["settings"]
    rows = [
        [str(i + 1), f"{r['heavy_vs_equal']}x", f"{r['others_min_vs_equal']}x",
         f"{r['others_max_vs_equal']}x", f"{r['largest_deviation'] * 100:.1f}%"]
        for i, r in enumerate(result["rounds"])
    ]  # fmt: skip
    table = markdown_table(
        ["round", "heavy org's share / equal", "others' min", "others' max", "largest deviation"],
        rows,
    )
    met = result["targets"]["deviation_met"]
    return (
        "### Fair by cost\n\n" + table + "\n\n"
        f"- Median of the largest deviation from an equal share: "
        f"**{result['median_largest_deviation'] * 100:.1f}%** (target <= "
        f"{TOLERANCE * 100:.0f}%: {verdict(met)}); round robin by count would give the heavy "
        f"organization {s['heavy_factor']:.0f}/{s['orgs'] - 1 + s['heavy_factor']:.0f} of the "
        f"time.\n"
        f"- {s['orgs']} organizations, jobs of {s['job_seconds'] * 1000:.0f} ms and one "
        f"organization's {s['job_seconds'] * s['heavy_factor'] * 1000:.0f} ms, cap 16 each; "
        f"{s['processes']} processes x {s['threads']} threads; window {s['seconds']:.0f} s "
        f"after {s['warmup_seconds']:.0f} s.\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fair_share", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--redis-url", default=REDIS_URL)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(rounds=options.rounds, redis_url=options.redis_url, seconds=options.seconds)
    path = write_result("fair_share", result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
