"""Throttle storm replay: document syncs requested many times over, each organization's under
its own Notion-style window scaled to 4 starts per second.

Scale 1 (the default): 158 unique documents of one organization requested 2,629 times.
``--scale N`` multiplies both (1,580 documents and 26,290 requests at 10) and spreads the
documents over ``--organizations`` (default: 1 at scale 1, else 5 per scale step, i.e. 50 at
10), document i to organization i mod M, so each holds about the same share of the storm.

The family (``b_sync``) routes by provider (``notion`` -> slow tier) and has
``windows={"notion": WindowRule(4, 1.0)}`` scoped per organization data source; each
organization's requests name its data source, so each organization has a window of its own.
The window is the family's declared rule: the platform has no path by which a provider's
rate-limit headers set a window (a 429 with Retry-After is a ``Delay``; quota headers block a
super-source connection until their reset). A sync takes ``SYNC_SECONDS`` (0.25 s).

The requests (each document at least once, the duplicates drawn at random, the whole stream
shuffled) are cut into 12 batches at random points; 9 batches are sent with
``Router.enqueue_many`` before the workers start, the last 3 back to back once they have
started, while the first syncs are in flight. A request that arrives after its document's
sync has finished runs it again (outcome ``replaced``): correct, but not a deduplication
failure, so it is reported apart (``executions`` = added + replaced when nothing runs twice).

**The physical limit** is the larger of two bounds no schedule can beat:

- the windows: an organization starts at most 4 syncs per window, so the slowest needs
  ceil(executions_org / 4) windows, counting the one the workers start in: its last sync
  starts no earlier than the opening of the last of them and runs ``SYNC_SECONDS``;
- the workers: ``processes x threads`` syncs run at once, so the storm needs
  executions x ``SYNC_SECONDS`` / (processes x threads) seconds.

The summary names the bound that binds. The workers are started at a window's opening, so the
first window is a whole one and the bound does not depend on when the run began.

Reported: enqueue outcomes (added / deduplicated / replaced), executions (handler runs),
failed attempts and attempts spent by the window (must be 0), starts over the limit in any
window (must be 0: counted by the window each start was admitted in, and by start time per
1 s as a provider on the same clock would count them), delays (window full -> ``Delay``),
reservations that lapsed, how late reserved starts began after their window opened,
fetches per execution (each delay is one more delivery), the worker log records at WARNING
and above, and the drain (worker start -> last sync done) in total and per organization,
against the physical limit; the target is a drain within 1.05x of it.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections import Counter, defaultdict
from typing import Any

from bench.common import (
    REDIS_URL,
    TraceReader,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    machine_busy_seconds,
    new_namespace,
    redis_cpu_seconds,
    rnd,
    write_result,
)
from bench.throttle_storm_report import TARGET_RATIO, physical_limit, summary, window_checks
from bench.worker_pool import WorkerPool

KIND = "bench_sync_document"
FAMILY = "b_sync"
#: The first organization's id; organization k is ``ORGANIZATION + k``.
ORGANIZATION = 7
DATA_SOURCE = "ods-1"
#: The storm at scale 1.
DOCUMENTS, REQUESTS = 158, 2_629

#: Worker settings: two slow-tier processes (the window must bind across processes), four
#: threads each (the slow tier's default), the slow tier's prefetch (0: one message per
#: thread, ``tiers.table``), and a 50 ms poll (how late an idle worker sees a queue filled by
#: another process).
DEFAULTS: dict[str, Any] = {
    "scale": 1,
    "organizations": None,
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


def organization_of(document: str, organizations: int) -> int:
    """The organization that owns ``document`` (``doc-<i>``): i mod ``organizations``."""
    return ORGANIZATION + int(document.removeprefix("doc-")) % organizations


def cut(stream: list[str], batches: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed + 1)
    points = sorted(rng.sample(range(1, len(stream)), batches - 1))
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def run(*, quick: bool = False, redis_url: str = REDIS_URL, **overrides: Any) -> dict[str, Any]:
    from bench.families import NOTION_WINDOW, SYNC_SECONDS, make_broker, make_router, worker_main
    from router.requests import JobRequest
    from tiers.rate_window import RateWindows
    from tiers.table import TIERS

    settings = dict(DEFAULTS)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    scale = settings["scale"]
    orgs = settings["organizations"] or (1 if scale == 1 else 5 * scale)
    settings.update(organizations=orgs, documents=DOCUMENTS * scale, requests=REQUESTS * scale)
    settings["prefetch"] = TIERS["slow"].prefetch(settings["threads"], settings["prefetch"])
    namespace = new_namespace("storm")
    client = connect(redis_url)
    info = machine(client)
    broker, fams = make_broker(redis_url, namespace, name="storm-enqueue")
    router = make_router(broker, fams)
    windows = RateWindows(client, namespace)
    queues = router.registry.queues_of_tier("slow")
    reader = TraceReader(client, namespace)
    stream = request_stream(settings["documents"], settings["requests"], settings["seed"])
    batches = cut(stream, settings["batches"], settings["seed"])
    early = len(batches) - settings["batches_while_running"]
    outcomes: Counter[str] = Counter()
    due: Counter[int] = Counter()
    sent_after_go: list[float] = []

    def send(batch: list[str]) -> None:
        owners = [organization_of(doc, orgs) for doc in batch]
        requests = [
            JobRequest(KIND, org, {"document": doc, "data_source": DATA_SOURCE})
            for org, doc in zip(owners, batch, strict=True)
        ]
        for org, answer in zip(owners, router.enqueue_many(requests), strict=True):
            outcomes[answer.outcome] += 1
            if answer.outcome in ("added", "replaced"):
                due[org] += 1

    workers = settings["processes"] * settings["threads"]
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
        # Start at a window's opening: the first window is a whole one.
        time.sleep(-time.time() % NOTION_WINDOW.period_seconds)
        cpu_before = (pool.cpu_seconds(), redis_cpu_seconds(client), machine_busy_seconds())
        went = pool.go()
        for batch in batches[early:]:
            time.sleep(settings["batch_interval_seconds"])
            send(batch)
            sent_after_go.append(time.time() - went)
        executions_due = sum(due.values())
        bound = physical_limit(
            due, NOTION_WINDOW.limit, NOTION_WINDOW.period_seconds, SYNC_SECONDS, workers, went
        )
        pool.wait_for(
            lambda: pool.total("completed") >= executions_due,
            timeout=bound["limit_seconds"] * 3 + 30,
            interval=0.05,
        )
        cpu_after = (pool.cpu_seconds(), redis_cpu_seconds(client), machine_busy_seconds())
        pool.shutdown()
        counters = pool.counters()
        reader.poll()
        records = [
            broker.jobs.record(f"sync-{organization_of(doc, orgs)}-{doc}")
            for doc in sorted(set(stream))
        ]
        lapsed = sum(
            windows.lapsed(windows.key(FAMILY, "notion", f"{org}:{DATA_SOURCE}")) for org in due
        )
    finally:
        pool.shutdown()
        broker.close()
        delete_namespace(client, namespace)
        client.close()

    starts = reader.of("start")
    ends = reader.of("end")
    worker_start = min(pool.values("started_at"))
    bound = physical_limit(
        due, NOTION_WINDOW.limit, NOTION_WINDOW.period_seconds, SYNC_SECONDS, workers, worker_start
    )
    drain_seconds = max(e["t"] for e in ends) - worker_start
    first_start = min(e["t"] for e in starts) - worker_start
    org_last_end: dict[int, float] = defaultdict(float)
    for e in ends:
        org_last_end[e["org"]] = max(org_last_end[e["org"]], e["t"] - worker_start)
    org_drains = sorted(org_last_end.values())
    checks = window_checks(starts, NOTION_WINDOW.limit, NOTION_WINDOW.period_seconds)
    states = Counter(r["state"] if r else "missing" for r in records)
    failures_recorded = sum(int(r.get("failures", 0)) for r in records if r)
    errors = Counter(r.get("last_error", "")[:160] for r in records if r and r.get("last_error"))
    runs_per_doc = Counter(e["item"] for e in starts)
    executions = len(starts)
    ratio = drain_seconds / bound["limit_seconds"]
    throttle_failures = int(counters["failed_window"])
    over_limit = checks["starts_over_window_limit"] + checks["starts_without_window"]
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
        "failure_errors": dict(errors.most_common(3)),
        "throttle_failures": throttle_failures,
        **checks,
        "lapsed_reservations": lapsed,
        "delays": int(counters["delayed"]),
        "deliveries": int(counters["delivered"]),
        "fetches_per_execution": rnd(counters["delivered"] / executions),
        "skipped_at_claim": int(counters["skipped"]),
        "final_states": dict(states),
        "worker_logs": pool.log_summary(),
        "executions_per_organization": {
            "min": min(due.values()),
            "max": max(due.values()),
        },
        "organization_drain_seconds": {
            "min": rnd(org_drains[0], 2),
            "median": rnd(statistics.median(org_drains), 2),
            "max": rnd(org_drains[-1], 2),
        },
        "first_start_seconds": rnd(first_start),
        "cpu_seconds": {
            name: rnd(after - before, 2)
            for name, before, after in zip(
                ("workers", "redis", "machine"), cpu_before, cpu_after, strict=True
            )
        },
        "drain_seconds": rnd(drain_seconds, 2),
        **bound,
        "drain_over_limit": rnd(ratio),
        "targets": {
            "executions": settings["documents"],
            "executions_met": executions == settings["documents"],
            "one_execution_per_admitted_request": executions == executions_due
            and len(runs_per_doc) == settings["documents"],
            "failures_met": counters["failed"] == 0 and failures_recorded == 0,
            "throttle_failures_met": throttle_failures == 0 and over_limit == 0,
            "drain_over_limit_at_most": TARGET_RATIO,
            "drain_met": ratio <= TARGET_RATIO,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throttle_storm", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="same as a full run (the storm)")
    parser.add_argument("--scale", type=int, help="documents and requests x N (default 1)")
    parser.add_argument("--organizations", type=int, help="default: 1 at scale 1, else 5 x scale")
    parser.add_argument("--processes", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--prefetch", type=int, help="per queue (default: the slow tier's)")
    parser.add_argument("--poll-ms", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--redis-url", default=REDIS_URL)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url,
        scale=options.scale,
        organizations=options.organizations,
        processes=options.processes,
        threads=options.threads,
        prefetch=options.prefetch,
        poll_ms=options.poll_ms,
        seed=options.seed,
    )
    scale = result["settings"]["scale"]
    path = write_result("throttle_storm" + (f"_x{scale}" if scale != 1 else ""), result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
