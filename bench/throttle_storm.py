"""Throttle storm replay: 158 unique document syncs requested 2,629 times under a Notion-style
window scaled to 4 starts per second.

The family (``b_sync``) routes by provider (``notion`` -> slow tier) and has
``windows={"notion": WindowRule(4, 1.0)}`` scoped per organization data source; every
request names the same data source, so the one window binds all of them. A sync takes
``SYNC_SECONDS`` (0.25 s).

The 2,629 requests (each document at least once, the duplicates drawn at random, the whole
stream shuffled) are cut into 12 batches at random points; 9 batches are sent with
``Router.enqueue_many`` before the workers start, the last 3 back to back once they have
started, while the first syncs are in flight. A request that arrives after its document's
sync has finished runs it again (outcome ``replaced``): correct, but not a deduplication
failure, so it is reported apart (``executions`` = added + replaced when nothing runs twice).

Reported: enqueue outcomes (added / deduplicated / replaced), executions (handler runs),
failed attempts, throttle failures (failed attempts attributable to the window, and starts
over the limit in any 1 s window, i.e. what the provider would have answered with 429),
delays (window full -> ``Delay``), fetches per execution (each delay is one more delivery),
the worker log records at WARNING and above, and the drain time (worker start -> last sync
done) against the limit: ceil(executions / 4) windows.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time
from collections import Counter
from typing import Any

from bench.common import (
    REDIS_URL,
    TraceReader,
    WorkerPool,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    log_note,
    machine,
    markdown_table,
    new_namespace,
    rnd,
    verdict,
    write_result,
)

KIND = "bench_sync_document"
ORGANIZATION = 7
DATA_SOURCE = "ods-1"

#: Worker settings: two slow-tier processes (the window must bind across processes), four
#: threads each (the slow tier's default), Dramatiq's default prefetch, and a 50 ms poll: the
#: poll bounds how late a due delayed message is moved back to its queue.
DEFAULTS: dict[str, Any] = {
    "documents": 158,
    "requests": 2_629,
    "batches": 12,
    "batches_while_running": 3,
    "batch_interval_seconds": 0.0,
    "processes": 2,
    "threads": 4,
    "prefetch": 0,
    "poll_ms": 50,
    "seed": 2629,
}


def request_stream(documents: int, requests: int, seed: int) -> list[str]:
    """Every document once plus ``requests - documents`` random duplicates, shuffled."""
    rng = random.Random(seed)
    names = [f"doc-{i:03d}" for i in range(documents)]
    stream = names + [rng.choice(names) for _ in range(requests - documents)]
    rng.shuffle(stream)
    return stream


def cut(stream: list[str], batches: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed + 1)
    points = sorted(rng.sample(range(1, len(stream)), batches - 1))
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def run(*, quick: bool = False, redis_url: str = REDIS_URL, **overrides: Any) -> dict[str, Any]:
    from bench.families import NOTION_WINDOW, SYNC_SECONDS, make_broker, make_router, worker_main
    from router.requests import JobRequest

    settings = dict(DEFAULTS)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    namespace = new_namespace("storm")
    client = connect(redis_url)
    info = machine(client)
    broker, fams = make_broker(redis_url, namespace, name="storm-enqueue")
    router = make_router(broker, fams)
    queues = router.registry.queues_of_tier("slow")
    reader = TraceReader(client, namespace)
    stream = request_stream(settings["documents"], settings["requests"], settings["seed"])
    batches = cut(stream, settings["batches"], settings["seed"])
    early = len(batches) - settings["batches_while_running"]
    outcomes: Counter[str] = Counter()
    sent_after_go: list[float] = []

    def send(batch: list[str]) -> None:
        answers = router.enqueue_many(
            [
                JobRequest(KIND, ORGANIZATION, {"document": doc, "data_source": DATA_SOURCE})
                for doc in batch
            ]
        )
        outcomes.update(a.outcome for a in answers)

    pool = WorkerPool(
        worker_main,
        (
            redis_url,
            namespace,
            queues,
            settings["threads"],
            settings["prefetch"],
            settings["poll_ms"],
        ),
        settings["processes"],
        name="throttle_storm",
    )
    try:
        pool.start()
        for batch in batches[:early]:
            send(batch)
        went = pool.go()
        for batch in batches[early:]:
            time.sleep(settings["batch_interval_seconds"])
            send(batch)
            sent_after_go.append(time.time() - went)
        executions_due = outcomes["added"] + outcomes["replaced"]
        limit_windows = math.ceil(executions_due / NOTION_WINDOW.limit)
        pool.wait_for(
            lambda: pool.total("completed") >= executions_due,
            timeout=limit_windows * NOTION_WINDOW.period_seconds * 3 + 30,
            interval=0.05,
        )
        pool.shutdown()
        counters = pool.counters()
        reader.poll()
        records = [
            broker.jobs.record(f"sync-{ORGANIZATION}-doc-{i:03d}")
            for i in range(settings["documents"])
        ]
    finally:
        pool.shutdown()
        broker.close()
        delete_namespace(client, namespace)
        client.close()

    starts = reader.of("start")
    ends = reader.of("end")
    worker_start = min(pool.values("started_at"))
    drain_seconds = max(e["t"] for e in ends) - worker_start
    limit_seconds = limit_windows * NOTION_WINDOW.period_seconds
    per_window = Counter(math.floor(e["t"] / NOTION_WINDOW.period_seconds) for e in starts)
    over_limit = sum(max(0, n - NOTION_WINDOW.limit) for n in per_window.values())
    states = Counter(r["state"] if r else "missing" for r in records)
    failures_recorded = sum(int(r.get("failures", 0)) for r in records if r)
    runs_per_doc = Counter(e["item"] for e in starts)
    executions = len(starts)
    ratio = drain_seconds / limit_seconds
    throttle_failures = int(counters["failed_window"])
    return {
        "benchmark": "throttle_storm",
        "quick": quick,
        "machine": info,
        "settings": {
            **settings,
            "window": f"{NOTION_WINDOW.limit} per {NOTION_WINDOW.period_seconds:g} s",
            "sync_seconds": SYNC_SECONDS,
            "batch_sizes": [len(b) for b in batches],
            "batches_sent_after_start_at_s": [rnd(t) for t in sent_after_go],
        },
        "enqueue_outcomes": dict(outcomes),
        "executions": executions,
        "documents_executed": len(runs_per_doc),
        "documents_run_more_than_once": sum(1 for n in runs_per_doc.values() if n > 1),
        "executions_beyond_admitted_requests": executions - executions_due,
        "failed_attempts": int(counters["failed"]),
        "failures_recorded": failures_recorded,
        "throttle_failures": throttle_failures,
        "starts_over_window_limit": over_limit,
        "max_starts_in_a_window": max(per_window.values()),
        "delays": int(counters["delayed"]),
        "deliveries": int(counters["delivered"]),
        "fetches_per_execution": rnd(counters["delivered"] / executions),
        "skipped_at_claim": int(counters["skipped"]),
        "final_states": dict(states),
        "worker_logs": pool.log_summary(),
        "drain_seconds": rnd(drain_seconds, 2),
        "limit_windows": limit_windows,
        "limit_seconds": limit_seconds,
        "drain_over_limit": rnd(ratio),
        "targets": {
            "executions": settings["documents"],
            "executions_met": executions == settings["documents"],
            "one_execution_per_admitted_request": executions == executions_due
            and len(runs_per_doc) == settings["documents"],
            "failures_met": counters["failed"] == 0 and failures_recorded == 0,
            "throttle_failures_met": throttle_failures == 0 and over_limit == 0,
            "drain_over_limit_at_most": 1.1,
            "drain_met": ratio <= 1.1,
        },
    }


def summary(result: dict[str, Any]) -> str:
    s, t, o = result["settings"], result["targets"], result["enqueue_outcomes"]
    table = markdown_table(
        ["requests (unique)", "executions", "failed attempts", "throttle failures", "delays",
         "drain", "limit", "drain / limit"],
        [[
            f"{s['requests']:,} ({s['documents']})",
            f"**{result['executions']}** ({result['documents_executed']} documents"
            + (f" + {o['replaced']} re-requested after their sync finished"
               if o.get("replaced") else "")
            + f"; one run per admitted request: "
            f"{verdict(t['one_execution_per_admitted_request'])})",
            f"{result['failed_attempts']} ({verdict(t['failures_met'])})",
            f"{result['throttle_failures']} ({verdict(t['throttle_failures_met'])})",
            f"{result['delays']:,}",
            f"{result['drain_seconds']} s",
            f"{result['limit_windows']} windows = {result['limit_seconds']:g} s",
            f"**{result['drain_over_limit']}** (target <= 1.1: {verdict(t['drain_met'])})",
        ]],
    )  # fmt: skip
    notes = [
        f"Enqueue outcomes: {o.get('added', 0)} added, {o.get('deduplicated', 0):,} "
        f"deduplicated, {o.get('replaced', 0)} replaced (a request after its document's sync "
        f"had finished runs it again by design); "
        f"{result['executions_beyond_admitted_requests']} executions beyond admitted requests.",
        f"Most starts in one 1 s window: {result['max_starts_in_a_window']} "
        f"(starts over the limit: {result['starts_over_window_limit']}); "
        f"{result['deliveries']:,} deliveries to worker threads = "
        f"{result['fetches_per_execution']} per execution (each delay is one more).",
        f"Window {s['window']} per organization data source (one data source); "
        f"{s['sync_seconds']} s syncs; {len(s['batch_sizes'])} enqueue_many batches "
        f"({s['batches_while_running']} sent while running, at "
        f"{', '.join(f'{x:g}' for x in s['batches_sent_after_start_at_s'])} s); "
        f"{s['processes']} worker processes x {s['threads']} threads, "
        f"prefetch {s['prefetch'] or 'Dramatiq default (threads x 2)'}, "
        f"poll {s['poll_ms']} ms.",
    ]
    logs = log_note(result["worker_logs"])
    if logs:
        notes.append(logs)
    return "### Throttle storm\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throttle_storm", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="same as a full run (the storm)")
    parser.add_argument("--processes", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--poll-ms", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--redis-url", default=REDIS_URL)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url,
        processes=options.processes,
        threads=options.threads,
        poll_ms=options.poll_ms,
        seed=options.seed,
    )
    path = write_result("throttle_storm", result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
