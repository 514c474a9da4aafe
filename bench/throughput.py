"""Throughput: no-op jobs through the whole platform against raw Dramatiq, same Redis, same
worker processes, threads and prefetch.

Platform: ``Router.enqueue_many`` (validation, job ids, pipelined identity script in batches
of 500) -> ``TierBroker`` -> worker processes running ``tiers.worker.serve`` with the whole
middleware stack of ``tiers.stack.build_broker`` (claim, pause switch, provider window,
outcomes), for a family with no group cap and no window.

Raw: a plain ``dramatiq.brokers.redis.RedisBroker`` with Dramatiq's default middleware and a
plain actor taking the same keyword arguments; enqueued with ``actor.send`` (Dramatiq has no
batch enqueue: one round trip per message); consumed by ``dramatiq.Worker``.

Both worker kinds get one extra middleware, :class:`bench.worker_pool.Counters`, which counts acks
into shared memory (no Redis traffic) so the driver knows when the last job is done.

Reported: enqueue and drain rates separately (drain: from the workers' start to the last ack),
the platform/raw ratios, Redis commands per job from ``INFO commandstats`` deltas, and the
peak resident set (VmHWM) of every worker process.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.common import (
    REDIS_URL,
    command_calls,
    command_delta,
    commands_per_job,
    connect,
    delete_namespace,
    foreign_clients,
    interrupt_on_sigterm,
    log_note,
    machine,
    machine_busy_seconds,
    markdown_table,
    new_namespace,
    redis_cpu_seconds,
    rnd,
    tagged_url,
    verdict,
    write_result,
)
from bench.worker_pool import Counters, WorkerPool, stop_event_from, wait_for_go

RAW_QUEUE = "raw_noop.fast"
TIER_QUEUE = "b_noop.fast"
ORGANIZATION = 1

#: Worker settings shared by both sides. Two processes with eight threads is the fast tier's
#: default shape (``SPEEDTIER_FAST_PROCESSES`` / ``_THREADS``); Dramatiq's default prefetch
#: (threads * 2) starves no-op threads, so both sides get a larger one.
DEFAULTS: dict[str, Any] = {
    "jobs": 20_000,
    "processes": 2,
    "threads": 8,
    "prefetch": 200,
    "poll_ms": 100,
    "rounds": 3,
}
QUICK_JOBS = 2_000


def raw_noop(organization_id: int, item: str) -> None:
    """The raw Dramatiq actor: nothing."""


def raw_worker_main(
    slot: int,
    shared: Any,
    go: Any,
    stop: Any,
    redis_url: str,
    namespace: str,
    threads: int,
    prefetch: int,
    poll_ms: int,
) -> None:
    """A raw Dramatiq worker process: default middleware, plain actor, plain Worker."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=tagged_url(redis_url, f"raw-worker-{slot}"), namespace=namespace
    )
    broker.add_middleware(Counters(shared, slot), before=type(broker.middleware[0]))
    dramatiq.actor(broker=broker, actor_name="raw_noop", queue_name=RAW_QUEUE)(raw_noop)
    stopping = stop_event_from(stop)
    wait_for_go(shared, slot, go)
    if stopping.is_set():
        return
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=poll_ms)
    worker.queue_prefetch = prefetch
    worker.start()
    stopping.wait()
    worker.stop(timeout=10_000)
    broker.close()


def _enqueue_raw(redis_url: str, namespace: str, jobs: int) -> float:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=tagged_url(redis_url, "raw-enqueue"), namespace=namespace
    )
    actor = dramatiq.actor(broker=broker, actor_name="raw_noop", queue_name=RAW_QUEUE)(raw_noop)
    started = time.perf_counter()
    for i in range(jobs):
        actor.send(organization_id=ORGANIZATION, item=str(i))
    elapsed = time.perf_counter() - started
    broker.close()
    return elapsed


def _enqueue_tier(redis_url: str, namespace: str, jobs: int) -> float:
    from bench.families import make_broker, make_router
    from router.requests import JobRequest

    broker, fams = make_broker(redis_url, namespace, name="tier-enqueue")
    router = make_router(broker, fams)
    requests = [JobRequest("bench_noop", ORGANIZATION, {"item": str(i)}) for i in range(jobs)]
    started = time.perf_counter()
    answers = router.enqueue_many(requests)
    elapsed = time.perf_counter() - started
    added = sum(1 for a in answers if a.outcome == "added")
    if added != jobs:
        raise RuntimeError(f"expected {jobs} added jobs, got {added}")
    broker.close()
    return elapsed


def measure(side: str, settings: dict[str, Any], redis_url: str) -> dict[str, Any]:
    """Enqueue ``jobs`` no-op jobs on one side, then drain them with fresh worker processes."""
    jobs = settings["jobs"]
    load = os.getloadavg()[0]
    namespace = new_namespace(f"tp-{side}")
    client = connect(redis_url)
    if side == "raw":
        target: Any = raw_worker_main
        args: tuple[Any, ...] = (redis_url, namespace)
        enqueue = _enqueue_raw
    else:
        from bench.families import worker_main

        target = worker_main
        args = (redis_url, namespace, [TIER_QUEUE])
        enqueue = _enqueue_tier
    args += (settings["threads"], settings["prefetch"], settings["poll_ms"])
    pool = WorkerPool(target, args, settings["processes"], name=f"throughput-{side}")
    try:
        pool.start()
        before = command_calls(client)
        enqueue_seconds = enqueue(redis_url, namespace, jobs)
        enqueued = command_calls(client)
        measured_from = time.monotonic()
        redis_cpu_before = redis_cpu_seconds(client)
        workers_cpu_before = pool.cpu_seconds()
        busy_before = machine_busy_seconds()
        pool.go()
        pool.wait_for(lambda: pool.total("acked") >= jobs, timeout=max(120, jobs / 50))
        drained = command_calls(client)
        redis_cpu = redis_cpu_seconds(client) - redis_cpu_before
        workers_cpu = pool.cpu_seconds() - workers_cpu_before
        busy = machine_busy_seconds() - busy_before
        wall = time.monotonic() - measured_from
        drain_seconds = max(pool.values("last_ack_at")) - min(pool.values("started_at"))
        memory = pool.memory_mib()
        foreign = foreign_clients(client, time.monotonic() - measured_from + enqueue_seconds)
        counters = pool.counters()
    finally:
        pool.shutdown()
        logs = pool.log_summary()
        delete_namespace(client, namespace)
        client.close()
    enqueue_commands = command_delta(before, enqueued)
    drain_commands = command_delta(enqueued, drained)
    total_commands = command_delta(before, drained)
    peaks = [m["peak_rss_mib"] or 0.0 for m in memory]
    return {
        "jobs": jobs,
        "enqueue_seconds": rnd(enqueue_seconds),
        "enqueue_jobs_per_second": round(jobs / enqueue_seconds),
        "drain_seconds": rnd(drain_seconds),
        "drain_jobs_per_second": round(jobs / drain_seconds),
        "commands_enqueue": commands_per_job(enqueue_commands, jobs),
        "commands_drain": commands_per_job(drain_commands, jobs),
        "commands_total": commands_per_job(total_commands, jobs),
        "drain_cpu_us_per_job": {
            "workers": round(workers_cpu / jobs * 1e6),
            "redis": round(redis_cpu / jobs * 1e6),
        },
        # CPU used during the drain by anything but the workers and Redis (other tenants of
        # the machine, the driver), as a share of the machine: a disturbance indicator.
        "other_cpu_share_during_drain": rnd(
            max(0.0, busy - workers_cpu - redis_cpu) / (wall * (os.cpu_count() or 1)), 2
        ),
        "worker_memory": memory,
        "peak_rss_mib_max": max(peaks),
        "counters": counters,
        "foreign_redis_clients": foreign,
        "worker_logs": logs,
        "load_average_before": rnd(load, 2),
    }


def run(*, quick: bool = False, redis_url: str = REDIS_URL, **overrides: Any) -> dict[str, Any]:
    """``rounds`` paired measurements (raw then platform, the order alternating per round).
    The round with the median platform/raw drain ratio is reported (every round is kept in
    the results), so one round disturbed by other load on the machine does not decide."""
    settings = dict(DEFAULTS)
    if quick:
        settings["jobs"], settings["rounds"] = QUICK_JOBS, 1
    settings.update({k: v for k, v in overrides.items() if v is not None})
    client = connect(redis_url)
    info = machine(client)
    client.close()
    rounds: list[dict[str, Any]] = []
    for number in range(settings["rounds"]):
        order = ("raw", "platform") if number % 2 == 0 else ("platform", "raw")
        rounds.append({side: measure(side, settings, redis_url) for side in order})
    paired = [
        rnd(r["platform"]["drain_jobs_per_second"] / r["raw"]["drain_jobs_per_second"])
        for r in rounds
    ]
    median_round = sorted(range(len(rounds)), key=lambda i: paired[i])[len(rounds) // 2]
    raw, tier = rounds[median_round]["raw"], rounds[median_round]["platform"]
    peak_raw = max(r["raw"]["peak_rss_mib_max"] for r in rounds)
    peak_tier = max(r["platform"]["peak_rss_mib_max"] for r in rounds)
    ratios: dict[str, Any] = {
        "drain_throughput": rnd(tier["drain_jobs_per_second"] / raw["drain_jobs_per_second"]),
        "drain_throughput_per_round": paired,
        "reported_round": median_round + 1,
        "drain_cpu_per_job": rnd(
            sum(raw["drain_cpu_us_per_job"].values()) / sum(tier["drain_cpu_us_per_job"].values())
        ),
        "enqueue_throughput": rnd(tier["enqueue_jobs_per_second"] / raw["enqueue_jobs_per_second"]),
        "peak_rss": rnd(peak_tier / peak_raw),
        "commands_per_job": rnd(
            tier["commands_total"]["calls_per_job"] / raw["commands_total"]["calls_per_job"]
        ),
        "script_calls_per_job": rnd(
            tier["commands_total"]["script_calls_per_job"]
            / raw["commands_total"]["script_calls_per_job"]
        ),
    }
    return {
        "benchmark": "throughput",
        "quick": quick,
        "machine": info,
        "settings": settings,
        "raw": raw,
        "platform": tier,
        "peak_rss_mib_all_rounds": {"raw": peak_raw, "platform": peak_tier},
        "ratios": ratios,
        "rounds": rounds,
        "targets": {
            "drain_throughput_at_least": 0.7,
            "drain_throughput_met": ratios["drain_throughput"] >= 0.7,
            "peak_rss_at_most": 1.3,
            "peak_rss_met": ratios["peak_rss"] <= 1.3,
        },
    }


def summary(result: dict[str, Any]) -> str:
    raw, tier, ratios, s = result["raw"], result["platform"], result["ratios"], result["settings"]
    targets = result["targets"]

    peaks = result["peak_rss_mib_all_rounds"]

    def cells(side: dict[str, Any], peak: float) -> list[Any]:
        cpu = side["drain_cpu_us_per_job"]
        return [
            f"{side['enqueue_jobs_per_second']:,} ({side['enqueue_seconds']:.2f} s)",
            f"{side['drain_jobs_per_second']:,} ({side['drain_seconds']:.2f} s)",
            f"{cpu['workers']} + {cpu['redis']}",
            side["commands_enqueue"]["calls_per_job"],
            side["commands_drain"]["calls_per_job"],
            f"{side['commands_total']['calls_per_job']} "
            f"({side['commands_total']['script_calls_per_job']})",
            peak,
        ]

    table = markdown_table(
        [
            "",
            "enqueue jobs/s",
            "drain jobs/s",
            "drain CPU us/job (workers + Redis)",
            "Redis cmds/job enqueue",
            "Redis cmds/job drain",
            "Redis cmds/job total (script calls)",
            "peak RSS per worker (MiB)",
        ],
        [
            ["raw Dramatiq", *cells(raw, peaks["raw"])],
            ["platform", *cells(tier, peaks["platform"])],
            [
                "platform / raw",
                ratios["enqueue_throughput"],
                f"**{ratios['drain_throughput']}** (target >= 0.7: "
                f"{verdict(targets['drain_throughput_met'])})",
                f"{ratios['drain_cpu_per_job']} (raw CPU / platform CPU)",
                "",
                "",
                ratios["commands_per_job"],
                f"**{ratios['peak_rss']}** (target <= 1.3: {verdict(targets['peak_rss_met'])})",
            ],
        ],
    )
    notes = [
        f"{s['jobs']:,} no-op jobs; {s['processes']} worker processes x {s['threads']} threads, "
        f"prefetch {s['prefetch']}, poll {s['poll_ms']} ms, both sides. "
        f"{s['rounds']} paired round(s), raw/platform order alternating; drain ratio per round: "
        f"{', '.join(str(r) for r in ratios['drain_throughput_per_round'])}; the table shows "
        f"round {ratios['reported_round']} (the median ratio). Other load on the machine "
        f"during that round's drains: raw {raw['other_cpu_share_during_drain']:.0%}, "
        f"platform {tier['other_cpu_share_during_drain']:.0%} of its CPU.",
        "Drain = from the workers' start to the last ack. Commands from INFO commandstats "
        "deltas (scripts' inner commands included; script calls = EVALSHA round trips). "
        "Peak RSS = VmHWM of each worker process, the largest over all rounds.",
    ]
    for name, side in (("raw", raw), ("platform", tier)):
        if side["foreign_redis_clients"]:
            notes.append(
                f"WARNING ({name}): other Redis clients were active during the measurement; "
                f"command counts include their traffic: {side['foreign_redis_clients']}"
            )
        logs = log_note(side["worker_logs"])
        if logs:
            notes.append(f"{name}: {logs}")
    return "### Throughput\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--prefetch", type=int)
    parser.add_argument("--poll-ms", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--redis-url", default=REDIS_URL)
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url,
        jobs=options.jobs,
        processes=options.processes,
        threads=options.threads,
        prefetch=options.prefetch,
        poll_ms=options.poll_ms,
        rounds=options.rounds,
    )
    path = write_result("throughput", result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
