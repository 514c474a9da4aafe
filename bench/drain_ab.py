"""The platform's drain of this checkout against another checkout's, in alternating rounds
(``python -m bench.drain_ab --baseline DIR``).

Each measure is ``bench.bullmq_compare``'s drain of the checkout it runs in (2 worker processes
x 8 threads, prefetch 200, poll 100 ms; 20,000 no-op jobs enqueued before the workers go), run
as a driver process of its own whose path starts with that checkout, so the workers it spawns
import that checkout's code (``bench.worker_start.python_env``). The two checkouts alternate,
each going first in every other round, and each round's ratio (this / baseline) of jobs/s and
of worker CPU a job is reported with the medians: a drain's rate moves by a tenth from one
minute to the next on a shared host, so only ratios taken in the same rounds compare trees.
The baseline needs ``bench.bullmq_compare.speedtier_drain`` (any checkout since it exists).
Results: ``bench/results/drain_ab.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import REDIS_URL, RESULTS_DIR
from bench.worker_start import ROOT, python_env

KINDS = {"plain": "bench_noop", "grouped": "bench_grouped"}
#: What a checkout's driver runs: its own drain, one JSON line out.
DRIVER = (
    "import json, sys\n"
    "from bench.bullmq_compare import speedtier_drain\n"
    "rate, cost = speedtier_drain(sys.argv[1], int(sys.argv[2]), sys.argv[3])\n"
    "print(json.dumps({'rate': rate, **cost}))\n"
)


def drain(root: Path, kind: str, jobs: int, redis_url: str) -> dict[str, Any]:
    """One drain by checkout ``root``: its jobs/s and costs a job."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, KINDS[kind], str(jobs), redis_url],
        cwd=root,
        env=python_env({}, root),
        capture_output=True,
        text=True,
        timeout=max(300, jobs / 20),
    )
    if done.returncode != 0:
        raise RuntimeError(f"the drain of {root} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rounds(
    baseline: Path, kind: str, jobs: int, count: int, redis_url: str
) -> list[dict[str, Any]]:
    """``count`` rounds, each draining this checkout and ``baseline``, the first alternating."""
    measured = []
    for number in range(count):
        sides = [("this", ROOT), ("baseline", baseline)]
        if number % 2:
            sides.reverse()
        round_ = {name: drain(root, kind, jobs, redis_url) for name, root in sides}
        print(f"<!-- round {number + 1} of {count} done -->", file=sys.stderr, flush=True)
        measured.append(round_)
    return measured


def summary(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of each side and of each round's ratios (this / baseline)."""

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    out: dict[str, Any] = {}
    for side in ("this", "baseline"):
        out[side] = {
            "jobs_per_second": median([r[side]["rate"] for r in measured]),
            "worker_cpu_us": median([r[side]["worker_cpu_us"] for r in measured]),
            "redis_cpu_us": median([r[side]["redis_cpu_us"] for r in measured]),
        }
    rate = [r["this"]["rate"] / r["baseline"]["rate"] for r in measured]
    cpu = [r["this"]["worker_cpu_us"] / r["baseline"]["worker_cpu_us"] for r in measured]
    out["rate_ratio"] = {"median": median(rate), "rounds": [round(x, 3) for x in rate]}
    out["worker_cpu_ratio"] = {"median": median(cpu), "rounds": [round(x, 3) for x in cpu]}
    return out


def report(kind: str, jobs: int, baseline: Path, result: dict[str, Any]) -> str:
    rate, cpu = result["rate_ratio"], result["worker_cpu_ratio"]
    lines = [
        f"### Drain of this checkout against {baseline} ({kind}, {jobs:,} jobs)",
        "",
        "| checkout | jobs/s (median) | worker CPU µs a job | Redis CPU µs a job |",
        "|---|---:|---:|---:|",
    ]
    for side in ("this", "baseline"):
        row = result[side]
        lines.append(
            f"| {side} | {row['jobs_per_second']:,.0f} | {row['worker_cpu_us']:g} | "
            f"{row['redis_cpu_us']:g} |"
        )
    lines += [
        "",
        f"This / baseline, each round: jobs/s {rate['rounds']} (median **{rate['median']}**); "
        f"worker CPU a job {cpu['rounds']} (median **{cpu['median']}**).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_ab", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--kind", choices=sorted(KINDS), default="plain")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    baseline = options.baseline.resolve()
    if not (baseline / "bench" / "bullmq_compare.py").exists():
        parser.error(f"{baseline} is not a speedtier checkout with bench.bullmq_compare")
    redis_url = options.redis_url or REDIS_URL
    measured = rounds(baseline, options.kind, options.jobs, options.rounds, redis_url)
    result = {"kind": options.kind, "jobs": options.jobs, "baseline": str(baseline)}
    result |= summary(measured) | {"samples": measured}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "drain_ab.json").write_text(json.dumps(result, indent=2))
    print(report(options.kind, options.jobs, baseline, result))


if __name__ == "__main__":
    main()
