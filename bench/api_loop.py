"""What a request costs a gthread worker's process, by the loop it runs:
``python -m bench.api_loop [--rounds N] [--seconds S]``.

Two gunicorn servers run the same bare WSGI app (:func:`app`, a fixed 2-byte answer) at once,
one with gunicorn's ``ThreadWorker`` and one with ``services.app.api.thread_loop``'s
``LeanThreadWorker``, 1 worker x 4 threads each. Each round loads each server with wrk
(keep-alive, closed loop) at 8 and at 32 connections, the servers' order alternating from
round to round, and reads the worker process's CPU before and after the step: CPU per
request and requests/s per step, and per round the lean loop's CPU per request over
gunicorn's at each concurrency. The app does nothing, so the loop's share of a request is as
large as it can be; an API route's own work adds the same to both.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds, process_stats, write_result
from bench.http_load import wrk_available
from testkit.ports import free_port

REPO = Path(__file__).resolve().parent.parent

LOOPS = {
    "gunicorn": "gunicorn.workers.gthread.ThreadWorker",
    "lean": "services.app.api.thread_loop.LeanThreadWorker",
}
CONCURRENCIES = (8, 32)
_REQUESTS = re.compile(r"(\d+) requests in")


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


@contextmanager
def server(worker_class: str) -> Iterator[tuple[int, int]]:
    """A gunicorn of one ``worker_class`` worker: its port and the worker's pid."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--worker-class", worker_class]
    command += ["--workers", "1", "--threads", "4", "--bind", f"127.0.0.1:{port}"]
    master = subprocess.Popen([*command, "--log-level", "warning", "bench.api_loop:app"], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while (worker := _worker_of(master.pid)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{worker_class}: no worker in 30 s")
            time.sleep(0.1)
        time.sleep(1.5)  # the worker imports and binds
        yield port, worker
    finally:
        master.terminate()
        master.wait(timeout=30)


def _worker_of(master: int) -> int | None:
    return next((pid for pid, fields in process_stats() if int(fields[1]) == master), None)


def step(port: int, worker: int, concurrency: int, seconds: int) -> dict[str, float]:
    """One wrk step: requests/s and the worker's CPU ms per request."""
    before = cpu_seconds(worker) or 0.0
    output = subprocess.run(
        ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = (cpu_seconds(worker) or 0.0) - before
    found = _REQUESTS.search(output)
    if found is None:
        raise RuntimeError(f"wrk printed no result: {output[-500:]}")
    requests = int(found.group(1))
    return {"requests_per_second": requests / seconds, "cpu_ms_per_request": cpu / requests * 1e3}


def measure(rounds: int, seconds: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    with server(LOOPS["gunicorn"]) as stock, server(LOOPS["lean"]) as lean:
        servers = {"gunicorn": stock, "lean": lean}
        for number in range(1, rounds + 1):
            order = ["gunicorn", "lean"] if number % 2 else ["lean", "gunicorn"]
            for concurrency in CONCURRENCIES:
                for loop in order:
                    result = step(*servers[loop], concurrency, seconds)
                    steps.append({"round": number, "loop": loop, "clients": concurrency, **result})
                    print(steps[-1], flush=True)
    return {"steps": steps, "summary": summary(steps)}


def summary(steps: list[dict[str, Any]]) -> dict[int, Any]:
    def at(loop: str, clients: int, key: str) -> list[float]:
        return [s[key] for s in steps if s["loop"] == loop and s["clients"] == clients]

    out: dict[int, Any] = {}
    for clients in CONCURRENCIES:
        stock, lean = (
            at("gunicorn", clients, "cpu_ms_per_request"),
            at("lean", clients, "cpu_ms_per_request"),
        )
        out[clients] = {
            "gunicorn_cpu_ms": statistics.median(stock),
            "lean_cpu_ms": statistics.median(lean),
            "lean_over_gunicorn": [round(b / a, 3) for a, b in zip(stock, lean, strict=True)],
            "gunicorn_rps": statistics.median(at("gunicorn", clients, "requests_per_second")),
            "lean_rps": statistics.median(at("lean", clients, "requests_per_second")),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=3)
    options = parser.parse_args()
    if not wrk_available():
        parser.exit(2, "wrk is not installed (Debian's wrk package): it loads the servers here\n")
    result = measure(options.rounds, options.seconds)
    print(
        "\n| clients | gunicorn's loop, CPU ms a request | lean loop "
        "| lean / gunicorn, each round | requests/s, gunicorn / lean |"
    )
    print("| ---: | ---: | ---: | --- | --- |")
    for clients, row in result["summary"].items():
        ratios = ", ".join(str(r) for r in row["lean_over_gunicorn"])
        print(
            f"| {clients} | {row['gunicorn_cpu_ms']:.4f} | {row['lean_cpu_ms']:.4f} | "
            f"{statistics.median(row['lean_over_gunicorn']):.3f} ({ratios}) | "
            f"{row['gunicorn_rps']:,.0f} / {row['lean_rps']:,.0f} |"
        )
    write_result(
        "api_loop", {"command": " ".join(["python -m bench.api_loop", *sys.argv[1:]]), **result}
    )


if __name__ == "__main__":
    main()
