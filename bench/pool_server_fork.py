"""When a worker pool forks its fork server: milliseconds from a fresh interpreter's first
statement to the entry point's fork of the server (``services.app.entry.start_pool_server``),
the step every pool's first job waits behind (the server's imports start there).

  python -m bench.pool_server_fork [--rounds N] [--baseline DIR]

Each round starts one interpreter for this checkout (and one for ``--baseline``'s, the two
alternating), with compiled bytecode kept (``bench.worker_start.python_env``). The script
wraps ``os.fork`` to note the time of its first call, starts the server, and prints that
time; the server it started exits with the script.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import write_result
from bench.worker_start import ROOT, python_env

NAME = "pool_server_fork"

SCRIPT = """
import time
began = time.perf_counter()
import os
fork, forked_at = os.fork, []
def noting_fork():
    forked_at.append(time.perf_counter() - began)
    return fork()
os.fork = noting_fork
from services.app.entry import start_pool_server
start_pool_server()
print(forked_at[0] * 1000 if forked_at else -1)
"""


def fork_ms(root: Path) -> float:
    """One start of ``root``'s entry point: the milliseconds to its server's fork."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=python_env({}, root),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return float(done.stdout.split()[-1])


def measure(rounds: int, baseline: Path | None) -> dict[str, Any]:
    sides = {"this checkout": ROOT, **({"baseline": baseline} if baseline else {})}
    for root in sides.values():
        fork_ms(root)  # bytecode compiled, files cached
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for number in range(rounds):
        order = list(sides.items()) if number % 2 == 0 else list(sides.items())[::-1]
        for side, root in order:
            samples[side].append(round(fork_ms(root), 2))
    return {
        side: {"median": statistics.median(values), "min": min(values), "max": max(values)}
        | {"samples": values}
        for side, values in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool_server_fork", description=__doc__)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately")
    options = parser.parse_args(argv)
    result = measure(options.rounds, options.baseline)
    print("| checkout | fork of the server, ms from the first statement: median | range |")
    print("|---|---:|---|")
    for side, figures in result.items():
        print(f"| {side} | {figures['median']:.1f} | {figures['min']:.1f} - {figures['max']:.1f} |")
    write_result(NAME, {"rounds": options.rounds, "results": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
