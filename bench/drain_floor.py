"""What the drain's Redis protocol costs alone: ``python -m bench.drain_floor [--rounds N]``.

The platform's drain (``bench.bullmq_compare``: 2 worker processes x 8 threads) beside a
**floor**: one thread of one process that drains the same jobs through the same scripts and
client code the worker uses, and nothing else. It fetches and claims 50 messages at a time
(``JobStore.fetch_and_claim``, ``fetch_claim.lua``), decodes each, hands each its start
(``start.lua``, sent ahead on the settle sender as a worker's run does) and its settle
(``settle.lua``, acking the delivery) with the no-op job's outcome, and waits for the answers
before the next fetch. No Dramatiq worker, thread hand-off or middleware; the run itself is
nothing. BullMQ's drain runs in the same rounds (skipped without Node).

Each round, in turn: BullMQ, the platform's drain, the floor, for plain jobs and for jobs of
the family capped at 5 per organization over 20. Reported per measure: jobs/s, the client's
CPU µs a job (the worker processes', or the floor's process) and Redis's; the median of the
rounds and each round's ratio to BullMQ. Results: ``bench/results/drain_floor.json``.

The floor is what a worker built on the same Redis protocol could at best reach on this
machine; the distance from it to the drain is what the worker's own path costs a job.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import (
    REDIS_URL,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    markdown_table,
    redis_cpu_seconds,
    rnd,
    write_result,
)

NAME = "drain_floor"
KINDS = {"plain": "bench_noop", "grouped": "bench_grouped"}


def floor(kind: str, jobs: int, redis_url: str) -> tuple[float, dict[str, float]]:
    """Jobs/s of the floor's loop over ``jobs`` of ``kind``, and its CPU a job (µs)."""
    from bench.script_ab import drain_batch, side

    namespace, broker, queue, _names = side(redis_url, "floor", None, kind, jobs)
    client = connect(redis_url)
    try:
        redis_before, cpu_before = redis_cpu_seconds(client), time.process_time()
        started, done = time.perf_counter(), 0
        while done < jobs:
            drained = drain_batch(broker, queue, starts=True)
            if not drained:
                raise RuntimeError(f"the floor found {done} of {jobs} jobs")
            done += drained
        seconds = time.perf_counter() - started
        cost = {
            "client_cpu_us": rnd((time.process_time() - cpu_before) / jobs * 1e6, 1),
            "redis_cpu_us": rnd((redis_cpu_seconds(client) - redis_before) / jobs * 1e6, 1),
        }
    finally:
        broker.close()
        delete_namespace(client, namespace)
        client.close()
    return jobs / seconds, cost


def measure(rounds: int, jobs: int, redis_url: str) -> dict[str, Any]:
    """``rounds`` rounds of every measure, alternating."""
    from bench.bullmq_compare import bullmq, ensure_bullmq, node_missing

    missing = node_missing()
    if missing is None:
        ensure_bullmq()
    runs: dict[str, list[dict[str, Any]]] = {}

    def record(name: str, measure: Callable[[], tuple[float, dict[str, Any]]]) -> None:
        rate, cost = measure()
        runs.setdefault(name, []).append({"jobs_per_second": round(rate), **cost})
        print(f"  {name}: {round(rate):,} jobs/s {cost}", flush=True)

    for number in range(1, rounds + 1):
        print(f"round {number}", flush=True)
        if missing is None:
            record("bullmq", lambda: (bullmq("drain", jobs, redis_url), {}))
        for kind, family in KINDS.items():
            record(f"drain_{kind}", functools.partial(_drain, family, jobs, redis_url))
            record(f"floor_{kind}", functools.partial(floor, kind, jobs, redis_url))
    return {"jobs": jobs, "rounds": rounds, "bullmq_skipped": missing, "runs": runs,
            "summary": summary(runs)}  # fmt: skip


def _drain(family: str, jobs: int, redis_url: str) -> tuple[float, dict[str, Any]]:
    """The platform's drain of ``jobs`` of ``family``: jobs/s, and its CPU a job as the floor's."""
    from bench.bullmq_compare import speedtier_drain

    rate, cost = speedtier_drain(family, jobs, redis_url)
    return rate, {"client_cpu_us": cost["worker_cpu_us"], "redis_cpu_us": cost["redis_cpu_us"]}


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per measure: medians, and each round's ratio to BullMQ's drain."""
    out: dict[str, Any] = {}
    peer = [r["jobs_per_second"] for r in runs.get("bullmq", [])]
    for name, rows in runs.items():
        figures: dict[str, Any] = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        if peer and name != "bullmq":
            ratios = [r["jobs_per_second"] / p for r, p in zip(rows, peer, strict=True)]
            figures["to_bullmq"] = [rnd(x, 2) for x in ratios]
            figures["to_bullmq_median"] = rnd(statistics.median(ratios), 2)
        out[name] = figures
    return out


def lines(result: dict[str, Any]) -> list[str]:
    headers = ["measure", "jobs/s", "client CPU µs a job", "Redis CPU µs a job",
               "to BullMQ (rounds)"]  # fmt: skip
    rows = [
        [
            name,
            f"{figures['jobs_per_second']:,.0f}",
            figures.get("client_cpu_us", "-"),
            figures.get("redis_cpu_us", "-"),
            f"{figures.get('to_bullmq_median', '-')} "
            f"({', '.join(str(x) for x in figures.get('to_bullmq', []))})",
        ]
        for name, figures in result["summary"].items()
    ]
    return [markdown_table(headers, rows)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_floor", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=10_000)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    client = connect(REDIS_URL)
    info = machine(client)
    client.close()
    result = {"machine": info, **measure(options.rounds, options.jobs, REDIS_URL)}
    print("\n".join(lines(result)))
    print(f"\n_Results in {write_result(NAME, result)}._")


if __name__ == "__main__":
    main()
