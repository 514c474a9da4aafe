"""The enqueue API under load: ``POST /internal/jobs/enqueue``, beside a bare route.

  python -m bench.enqueue_api                  # bodies of 1 and of 100 requests, a curve
  python -m bench.enqueue_api --quick          # shorter steps, fewer concurrencies
  python -m bench.enqueue_api --quick --rounds 5   # and 4 more rounds of the 8 and 32 pair
  python -m bench.enqueue_api --load aiohttp --workers 3 --threads 2 --no-access-log

``speedtier api`` (gunicorn, ``--workers`` x ``--threads``, production settings with a bearer
token, its access log on as in production) runs on the real Redis (``BENCH_REDIS_URL``, a fresh
key namespace, deleted afterwards) and an embedded, migrated PostgreSQL 18. Beside it runs the
machine's own ceiling: the same gunicorn (same worker class, workers, threads and access log)
serving a bare Flask app whose one route reads the body and answers a fixed 202. Load comes
from ``bench.http_load`` (wrk when installed, else aiohttp; ``--load`` chooses), closed loop,
each request a ``summarize_conversation`` job of its own conversation (no deduplication).
For each concurrency of single-request bodies the API and the ceiling are loaded one after
the other, so their ratio is taken under the same load on the machine.

Reported per step: requests/s, jobs/s, p50/p99 latency, non-202 answers, how the open
connections are spread over the server's workers (sampled mid-step: a keep-alive connection
stays with the worker that accepted it), the CPU (in cores) of the load generator, the
server's processes and the Redis server (every client of it), the server's CPU per request
and the 1-minute load average (the machine is shared: ratios within one run matter most).
The targets and their verdicts, computed from the steps, are in ``bench.enqueue_api_report``:
>= 2,000 requests/s with p99 <= 20 ms, p99 <= 5x p50 at every concurrency from 1 to 32, and
no lower rate at 32 clients than at 8 (single-request bodies).

``--rounds N`` adds N - 1 rounds of the two steps that decide "no drop" (8 and 32 clients,
API and ceiling each), the order of the pair alternating from round to round, after the
curve (its first round): the server's CPU per request moves by several percent between
steps a few seconds apart, so one pair's ratio says little about a difference of that size.
Each round's ratio is reported, and the verdict is on their median.

wrk's percentiles include its coordinated-omission correction: one stall of 75 ms on a
connection that sends a request every 1 ms counts as 75 slow requests, so at one client a
single pause in a 3 s step moves p99 to tens of milliseconds. aiohttp's are of the requests
sent.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from bench.common import (
    REDIS_URL,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    new_namespace,
    process_stats,
    redis_cpu_seconds,
    rnd,
    write_result,
)
from bench.enqueue_api_report import NO_DROP_FROM, TAIL_UP_TO, summary, targets
from bench.http_load import PATH, run_load, wrk_available
from bench.server_connections import SpreadSample
from testkit.ports import free_port

NAME = "enqueue_api"
#: Strong enough for production's floor (``shared.secret_strength``).
TOKEN = "bench-enqueue-api-x7Qm2Rv9Lk4Tz8Wc1Hn6Jp3Yb5Ds0Fg"
WORKERS, THREADS = 2, 4
CURVE = {1: (1, 4, 8, 16, 32, 64), 100: (1, 4, 8)}
QUICK_CURVE = {1: (1, 8, 32), 100: (4,)}
#: The ceiling's fixed answer: one job, the shape of a real one.
CEILING_ANSWER = (
    b'{"jobs":[{"job_id":"summarize-conversation-1","outcome":"added",'
    b'"queue":"default","kind":"summarize_conversation"}]}\n'
)


@contextmanager
def _served(command: list[str], env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """A server on a free port (``command`` gets ``--port``); its base URL and process group
    while it runs."""
    port = free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,  # the access log: written, as in production, not kept
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process)
        yield base, process.pid
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def api_server(
    redis_url: str,
    namespace: str,
    database_url: str,
    workers: int,
    threads: int,
    access_log: bool = True,
) -> Any:
    """``speedtier api`` in a child process (a context manager: base URL, process group)."""
    env = {
        **os.environ,
        "SPEEDTIER_ENV": "production",
        "INTERNAL_API_TOKEN": TOKEN,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": Fernet.generate_key().decode(),
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ALLOW_VOLATILE_REDIS": "true",
        "LOG_LEVEL": "WARNING",
    }
    binary = str(Path(sys.executable).with_name("speedtier"))
    command = [binary, "api", "--host", "127.0.0.1", "--workers", str(workers)]
    command += ["--threads", str(threads), "--access-log" if access_log else "--no-access-log"]
    return _served(command, env)


def ceiling_server(workers: int, threads: int, access_log: bool = True) -> Any:
    """The bare Flask app under the same gunicorn settings (a context manager, as above)."""
    command = [sys.executable, "-m", "bench.enqueue_api", "--serve-ceiling"]
    if not access_log:
        command.append("--no-access-log")
    return _served(
        [*command, "--workers", str(workers), "--threads", str(threads)], dict(os.environ)
    )


def ceiling_app() -> Any:
    """A Flask app with the API's path that reads the body and answers a fixed 202."""
    from flask import Flask, Response, request

    app = Flask(__name__, static_folder=None)

    @app.post(PATH)
    def enqueue() -> Response:
        request.get_data(cache=False)
        return Response(CEILING_ANSWER, 202, mimetype="application/json")

    @app.get("/readyz")
    def ready() -> Response:
        return Response(b'{"status":"ok"}', 200, mimetype="application/json")

    return app


def serve_ceiling(port: int, workers: int, threads: int, access_log: bool = True) -> None:
    """Serve :func:`ceiling_app` with ``speedtier api``'s gunicorn options."""
    from services.app.cli.api import ApiServer, server_options

    class CeilingServer(ApiServer):
        def load(self) -> Any:
            return ceiling_app()

    options = server_options("127.0.0.1", port, workers, "WARNING", threads, access_log)
    options.pop("child_exit")  # no metrics here
    CeilingServer(options).run()


def _wait_ready(base: str, process: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"the server exited with {process.returncode}: {error[-2000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become ready in 90 s")


def group_cpu_seconds(group: int) -> float:
    """User + system CPU time used so far by the live processes of a process group."""
    total = sum(
        int(fields[11]) + int(fields[12])
        for _pid, fields in process_stats()
        if int(fields[2]) == group
    )
    return total / os.sysconf("SC_CLK_TCK")


def _step(
    server: str,
    group: int,
    base: str,
    redis: Any,
    *,
    tool: str,
    size: int,
    concurrency: int,
    seconds: float,
    warmup: float,
    start: int,
) -> dict[str, Any]:
    server_before, redis_before = group_cpu_seconds(group), redis_cpu_seconds(redis)
    began = time.monotonic()
    # Mid-measurement (wrk opens new connections after its warm-up run).
    spread = SpreadSample(group, int(base.rsplit(":", 1)[1]), warmup + 0.2 + seconds / 2)
    load = run_load(
        tool,
        base,
        TOKEN,
        size=size,
        concurrency=concurrency,
        seconds=seconds,
        warmup=warmup,
        start=start,
    )
    # CPU is sampled around warm-up and measurement alike: per second of both.
    elapsed = time.monotonic() - began
    server_cores = (group_cpu_seconds(group) - server_before) / elapsed
    redis_cores = (redis_cpu_seconds(redis) - redis_before) / elapsed
    rate = load["requests"] / load["seconds"]
    return {
        "server": server,
        "body_requests": size,
        "concurrency": concurrency,
        "requests": load["requests"],
        "requests_per_second": rnd(rate, 1),
        "jobs_per_second": rnd(rate * size, 1),
        "p50_ms": rnd(load["p50_ms"], 2),
        "p99_ms": rnd(load["p99_ms"], 2),
        "non_202": load["non_202"],
        "connections_per_worker": spread.result(),
        "client_cores": rnd(load["client_cpu_seconds"] / load["seconds"], 2),
        "server_cores": rnd(server_cores, 2),
        "redis_cores": rnd(redis_cores, 2),
        "server_cpu_ms_per_request": rnd(server_cores / rate * 1000, 3) if rate else None,
        "load_average_1m": rnd(os.getloadavg()[0], 2),
        "next": load["next"],
    }


def run(
    *,
    quick: bool = False,
    redis_url: str = REDIS_URL,
    load: str | None = None,
    workers: int = WORKERS,
    threads: int = THREADS,
    ceiling: bool = True,
    access_log: bool = True,
    rounds: int = 1,
) -> dict[str, Any]:
    from services.app.embedded import start_embedded_postgres
    from shared.db.migrate import upgrade

    tool = load or ("wrk" if wrk_available() else "aiohttp")
    curve = QUICK_CURVE if quick else CURVE
    seconds, warmup = (3.0, 1.0) if quick else (8.0, 2.0)
    client = connect(redis_url)
    info = machine(client)
    namespace = new_namespace(NAME)
    steps: list[dict[str, Any]] = []
    start = 0
    step: dict[str, Any] = {"tool": tool, "seconds": seconds, "warmup": warmup}

    def record(result: dict[str, Any]) -> None:
        nonlocal start
        start = result.pop("next")
        steps.append(result)
        print(f"<!-- {result} -->", file=sys.stderr, flush=True)

    try:
        with tempfile.TemporaryDirectory(prefix="bench-enqueue-api-") as directory:
            service = start_embedded_postgres(
                Path(directory) / "postgres", port=0, database="bench_enqueue_api"
            )
            try:
                upgrade(service.url)
                with (
                    api_server(
                        redis_url, namespace, service.url, workers, threads, access_log
                    ) as api,
                    ceiling_server(workers, threads, access_log) if ceiling else _nothing() as bare,
                ):

                    def measure(size: int, concurrency: int, round_: int) -> None:
                        shape = {**step, "size": size, "concurrency": concurrency}
                        result = _step("api", api[1], api[0], client, **shape, start=start)
                        record({**result, "round": round_})
                        if bare is not None and size == 1:
                            result = _step(
                                "ceiling", bare[1], bare[0], client, **shape, start=start
                            )
                            record({**result, "round": round_})

                    for size, concurrencies in curve.items():
                        for concurrency in concurrencies:
                            measure(size, concurrency, 1)
                    for round_ in range(2, rounds + 1):
                        pair = (NO_DROP_FROM, TAIL_UP_TO)
                        for concurrency in pair if round_ % 2 else pair[::-1]:
                            measure(1, concurrency, round_)
            finally:
                service.stop()
    finally:
        delete_namespace(client, namespace)
        client.close()
    return {
        "machine": info,
        "settings": {
            "workers": workers,
            "threads": threads,
            "access_log": access_log,
            "load": tool,
            "rounds": rounds,
            **step,
        },
        "steps": steps,
        "targets": targets(steps),
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.enqueue_api", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter steps, fewer of them")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    parser.add_argument(
        "--load", choices=("wrk", "aiohttp"), help="load generator (default: wrk if installed)"
    )
    parser.add_argument("--workers", type=int, default=WORKERS, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads per worker")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of the 8 and 32 client steps (the first is the curve's), order alternating",
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the bare Flask ceiling")
    parser.add_argument("--no-access-log", action="store_true", help="both servers without it")
    parser.add_argument("--serve-ceiling", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    if options.serve_ceiling:
        serve_ceiling(options.port, options.workers, options.threads, not options.no_access_log)
        return 0
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url or REDIS_URL,
        load=options.load,
        workers=options.workers,
        threads=options.threads,
        ceiling=not options.no_ceiling,
        access_log=not options.no_access_log,
        rounds=options.rounds,
    )
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
