"""Where a drain's messages wait: ``python -m bench.drain_anatomy [--kind grouped|plain]``.

It runs the drain of ``bench.bullmq_compare`` (2 worker processes x 8 threads, prefetch 200,
poll 100 ms; the grouped family's cap 5 over 20 organizations) while each worker process
samples itself every 5 ms:

- **held**: the messages its consumers fetched and have not acked (a grouped one holds its
  group's slot until its settle runs in Redis);
- **work queue**: of those, the ones waiting for a worker thread;
- **settle sender**: the start and settle calls handed to its settle sender and not answered
  yet (``tiers.script_batch.ScriptQueue``);
- **fair order** (the first process only): the admitted messages waiting in Redis for a fetch
  (``<ns>:<queue>.fq``);

and times each round trip of its settle sender: the calls it carried, its wall time and the
sender thread's CPU in it. A drain whose worker threads wait while its held messages are
settles on their way is bound by those round trips, not by the CPU a job costs.
Results: ``bench/results/drain_anatomy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dramatiq.middleware import Middleware

from bench.common import (
    REDIS_URL,
    connect,
    interrupt_on_sigterm,
    machine,
    markdown_table,
    percentile,
    rnd,
    write_result,
)

NAME = "drain_anatomy"
KINDS = {"grouped": "bench_grouped", "plain": "bench_noop"}
SAMPLE_SECONDS = 0.005
#: The environment variable telling the worker processes where to write what they saw.
OUT_DIR = "SPEEDTIER_BENCH_ANATOMY_DIR"


def anatomy_worker(slot: int, *args: Any) -> None:
    """``bench.families.worker_main``, with the sampler started at the worker's boot and the
    settle sender's round trips timed (this process only)."""
    import bench.families as families
    from tiers.script_batch import ScriptQueue

    out = Path(os.environ[OUT_DIR])
    trips: list[tuple[int, float, float]] = []
    send = ScriptQueue._send_until_answered

    def timed(queue: ScriptQueue, batch: Sequence[Any]) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        send(queue, batch)
        trips.append((len(batch), time.perf_counter() - wall, time.thread_time() - cpu))

    ScriptQueue._send_until_answered = timed  # type: ignore[method-assign,assignment]
    make_broker = families.make_broker
    samples: list[tuple[int, int, int, int]] = []

    def with_sampler(*a: Any, **k: Any) -> Any:
        broker, fams = make_broker(*a, **k)
        broker.add_middleware(_Sampler(slot, samples))
        return broker, fams

    families.make_broker = with_sampler
    try:
        families.worker_main(slot, *args)
    finally:
        (out / f"{slot}.json").write_text(json.dumps({"samples": samples, "trips": trips}))


class _Sampler(Middleware):
    """Starts the sampling thread once the worker runs (its one hook)."""

    def __init__(self, slot: int, samples: list[tuple[int, int, int, int]]) -> None:
        self.slot, self.samples = slot, samples

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        threading.Thread(target=self._sample, args=(broker, worker), daemon=True).start()

    def _sample(self, broker: Any, worker: Any) -> None:
        jobs = broker.jobs
        fair = f"{broker.namespace}:{sorted(worker.consumers)[0]}.fq"
        while True:
            time.sleep(SAMPLE_SECONDS)
            consumers = [c.consumer for c in list(worker.consumers.values())]
            held = sum(len(c.queued_message_ids) + len(c.message_cache) for c in consumers if c)
            waiting = int(broker.client.zcard(fair)) if self.slot == 0 else -1
            self.samples.append((held, worker.work_queue.qsize(), jobs.settles_unanswered, waiting))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, 10th and 90th percentiles."""
    if not values:
        return {}
    return {
        "median": rnd(statistics.median(values), 2),
        "p10": rnd(percentile(values, 10), 2),
        "p90": rnd(percentile(values, 90), 2),
    }


def measure(kind: str, jobs: int) -> dict[str, Any]:
    """One drain of ``jobs`` of ``kind`` (grouped, plain), sampled."""
    from bench.bullmq_compare import speedtier_drain

    with tempfile.TemporaryDirectory() as out:
        os.environ[OUT_DIR] = out
        try:
            rate, cost = speedtier_drain(KINDS[kind], jobs, REDIS_URL, worker=anatomy_worker)
        finally:
            del os.environ[OUT_DIR]
        seen = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*.json"))]
    processes = []
    for process in seen:
        # Only while the process held work: the idle moments before the go and after the last
        # ack say nothing of the drain.
        busy = [s for s in process["samples"] if s[0] > 0]
        trips = [t for t in process["trips"] if t[0] > 1]
        processes.append(
            {
                "held": spread([s[0] for s in busy]),
                "work_queue": spread([s[1] for s in busy]),
                "settle_sender_unanswered": spread([s[2] for s in busy]),
                "fair_order_waiting": spread([s[3] for s in busy if s[3] >= 0]),
                "trips": len(trips),
                "trip_calls": spread([t[0] for t in trips]),
                "trip_wall_ms": spread([t[1] * 1000 for t in trips]),
                "trip_sender_cpu_ms": spread([t[2] * 1000 for t in trips]),
            }
        )
    return {"kind": kind, "jobs": jobs, "jobs_per_second": round(rate), "cost": cost,
            "processes": processes}  # fmt: skip


def lines(result: dict[str, Any]) -> list[str]:
    rows: list[list[Any]] = []
    for slot, process in enumerate(result["processes"]):
        for measure, figures in process.items():
            if isinstance(figures, dict) and figures:
                rows.append([slot, measure, figures["median"], figures["p10"], figures["p90"]])
        rows.append([slot, "settle sender round trips", process["trips"], "", ""])
    return [
        f"{result['kind']} drain, {result['jobs']:,} jobs: {result['jobs_per_second']:,} jobs/s; "
        f"{json.dumps(result['cost'])}",
        "",
        markdown_table(["process", "measure", "median", "p10", "p90"], rows),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_anatomy", description=__doc__)
    parser.add_argument("--kind", choices=sorted(KINDS), default="grouped")
    parser.add_argument("--jobs", type=int, default=20_000)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    client = connect(REDIS_URL)
    info = machine(client)
    client.close()
    result = {"machine": info, **measure(options.kind, options.jobs)}
    print("\n".join(lines(result)))
    print(f"\n_Results in {write_result(NAME, result)}._")


if __name__ == "__main__":
    main()
