"""How steady this machine's CPU is: the yardstick for every ratio the other benchmarks report.

  python -m bench.steadiness [--seconds 30]

A fixed piece of pure-Python work (a loop of integer arithmetic, about a third of a second)
is timed by its own CPU clock, over and over: alternately alone (one process, the other core
idle) and as two processes at once (both cores busy). Its CPU time should not move; what it
does move by is how much this machine's speed changes from one moment to the next (another
tenant of the host, frequency changes) and how much its two cores slow each other when both
are busy. A benchmark's ratio of two measures taken seconds apart cannot be trusted closer
than this spread, and one that compares a workload keeping both cores busy with one keeping
one busy (the ingestion ceilings, a grouped drain) carries the pair slowdown too.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

#: Iterations of the timed loop: about 0.3 s of CPU on this machine when it is fast.
LOOP = 6_000_000


def timed_work(iterations: int = LOOP) -> float:
    """CPU seconds this process spends on ``iterations`` steps of integer arithmetic."""
    started = time.process_time()
    total = 0
    for i in range(iterations):
        total += i * i
    return time.process_time() - started


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
        "max_over_min": round(max(values) / min(values), 2),
    }


def run(seconds: float, iterations: int = LOOP) -> dict[str, Any]:
    """Alternate one timing alone and one pair of simultaneous timings for ``seconds``."""
    alone: list[float] = []
    paired: list[float] = []
    slowdowns: list[float] = []
    deadline = time.monotonic() + seconds
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(timed_work, [1000, 1000])  # both children started before the clock runs
        while time.monotonic() < deadline or len(alone) < 2:
            single = timed_work(iterations)
            pair = pool.map(timed_work, [iterations, iterations])
            alone.append(single)
            paired.extend(pair)
            slowdowns.append(max(pair) / single)
    return {
        "seconds": seconds,
        "iterations": iterations,
        "samples": len(alone),
        "alone_cpu_seconds": _spread(alone),
        "paired_cpu_seconds": _spread(paired),
        "pair_slowdown": _spread(slowdowns),
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    alone, paired = result["alone_cpu_seconds"], result["paired_cpu_seconds"]
    slowdown = result["pair_slowdown"]
    return [
        "### CPU steadiness",
        "",
        f"The same {result['iterations']:,}-step loop, timed by its own CPU clock "
        f"{result['samples']} times alone and {2 * result['samples']} times in pairs over "
        f"{result['seconds']:g} s:",
        "",
        "| run | min s | median s | max s | max / min |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {s['min']} | {s['median']} | {s['max']} | {s['max_over_min']} |"
            for name, s in (("alone", alone), ("two at once", paired))
        ),
        "",
        f"A pair's slower side against the timing alone just before it: {slowdown['min']} to "
        f"{slowdown['max']}x (median {slowdown['median']}). Ratios of measures taken seconds "
        "apart on this machine are good to about this spread, no better.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steadiness", description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long (default 30)")
    options = parser.parse_args(argv)

    from bench.common import write_result

    result = run(options.seconds)
    print("\n".join(summary_lines(result)))
    print(f"\n_Results in {write_result('steadiness', result)}._")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
