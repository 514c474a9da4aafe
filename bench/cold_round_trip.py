"""What a round trip costs the thread that makes it, in a loop of them and right after a
stretch of CPU work (``python -m bench.cold_round_trip``).

A drained job's fetch, start and settle are shared with many others and made back to back; a
job that arrives alone makes its own, each right after some thread of its process spent
milliseconds of CPU (the job before it, or another job beside it). This measures, in one
thread, the thread's own CPU clock around one operation made after ``--burn-ms`` of CPU spent
in Python (**after CPU**) and around the same operation made again at once (**hot**), the
two timings a pair taken microseconds apart (a host whose speed drifts moves both alike):

- a Redis ``PING`` through redis-py (a send, a blocking receive, Redis woken meanwhile);
- a byte written to and read back from a local socket pair (two system calls, no wait);
- a ``time.sleep`` of 0.1 ms (a block and a wake-up, no Redis);
- pure Python work (``json`` encoding and decoding a small document 20 times), the control.

Each round times every kind ``--times`` times; the report gives each kind's median over the
rounds of its per-round medians, and the median of the rounds' after CPU over hot.
Results: ``bench/results/cold_round_trip.json``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.common import REDIS_URL, RESULTS_DIR, connect

DOCUMENT = {"numbers": list(range(50)), "text": "x" * 200, "nested": {"value": 1.5}}


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU in Python."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        for _ in range(1_000):
            pass


def operations(redis_url: str) -> dict[str, Callable[[], Any]]:
    client = connect(redis_url)
    client.ping()
    left, right = socket.socketpair()

    def socket_pair() -> None:
        left.send(b"x")
        right.recv(1)

    def python_work() -> None:
        for _ in range(20):
            json.loads(json.dumps(DOCUMENT))

    return {
        "redis PING": client.ping,
        "socket pair, a byte there and back": socket_pair,
        "sleep 0.1 ms": lambda: time.sleep(0.0001),
        "Python work (json)": python_work,
    }


def costs_us(operation: Callable[[], Any], burn_ms: float, times: int) -> tuple[float, float]:
    """The medians of ``times`` timings of ``operation`` by this thread's CPU clock made
    after ``burn_ms`` of CPU, and of the same operation made again straight after each."""
    after_cpu, hot = [], []
    for _ in range(times):
        burn(burn_ms / 1000)
        started = time.thread_time()
        operation()
        between = time.thread_time()
        operation()
        hot.append(time.thread_time() - between)
        after_cpu.append(between - started)
    return statistics.median(after_cpu) * 1e6, statistics.median(hot) * 1e6


def run(rounds: int, burn_ms: float, times: int, redis_url: str) -> dict[str, Any]:
    ops = operations(redis_url)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"hot": [], "after_cpu": []} for name in ops
    }
    for _ in range(rounds):
        for name, operation in ops.items():
            after_cpu, hot = costs_us(operation, burn_ms, times)
            samples[name]["after_cpu"].append(after_cpu)
            samples[name]["hot"].append(hot)
    medians = {
        name: {
            "hot_us": round(statistics.median(s["hot"]), 1),
            "after_cpu_us": round(statistics.median(s["after_cpu"]), 1),
            "ratio": round(
                statistics.median(a / h for a, h in zip(s["after_cpu"], s["hot"], strict=True)),
                2,
            ),
        }
        for name, s in samples.items()
    }
    return {
        "settings": {"rounds": rounds, "burn_ms": burn_ms, "times": times},
        "medians": medians,
        "samples": samples,
    }


def report(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = [
        "### A round trip's CPU, hot and after CPU work",
        "",
        f"One thread; each operation timed by the thread's CPU clock {settings['times']} times "
        f"a round after {settings['burn_ms']:g} ms of CPU, and again at once (hot); medians "
        f"of {settings['rounds']} rounds.",
        "",
        "| operation | hot, µs | after CPU, µs | after CPU / hot |",
        "|---|---:|---:|---:|",
    ]
    for name, row in result["medians"].items():
        lines.append(f"| {name} | {row['hot_us']:g} | {row['after_cpu_us']:g} | {row['ratio']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_round_trip", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burn-ms", type=float, default=10.0, help="CPU before each timing")
    parser.add_argument("--times", type=int, default=200, help="timings of each kind a round")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    result = run(options.rounds, options.burn_ms, options.times, options.redis_url or REDIS_URL)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "cold_round_trip.json").write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
