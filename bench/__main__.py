"""``python -m bench`` (``make bench``): run the benchmarks, print a markdown summary and write
``bench/results/<name>.json``.

  python -m bench                 # throughput (20,000 jobs), fairness (10,000 backlog), the
                                  # share of worker time by cost, storm,
                                  # ingestion, the enqueue API under load, Redis CPU per path,
                                  # idle workers' CPU (queues watched and polled)
  python -m bench --quick         # smoke run: 2,000 jobs, 1,000 backlog, the full storm
  python -m bench --only fairness --only throttle_storm

Redis: ``BENCH_REDIS_URL`` or ``--redis-url`` (default ``redis://127.0.0.1:6379/14``); each
run uses a fresh key namespace and deletes it afterwards.
"""

# Spawned worker processes import this module (as ``__mp_main__``): import nothing heavy here.
from __future__ import annotations

import argparse
import sys
import time

NAMES = (
    "throughput",
    "fairness",
    "fair_share",
    "throttle_storm",
    "ingestion",
    "enqueue_api",
    "redis_cpu",
    "idle_workers",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller run for smoke checking")
    parser.add_argument("--only", action="append", choices=NAMES, help="run only these")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when a target is missed"
    )
    options = parser.parse_args(argv)

    import importlib

    from bench.common import REDIS_URL, connect, interrupt_on_sigterm, machine, write_result
    from shared import progress

    interrupt_on_sigterm()

    redis_url = options.redis_url or REDIS_URL
    selected = [name for name in NAMES if not options.only or name in options.only]
    client = connect(redis_url)
    info = machine(client)
    client.close()
    command = "python -m bench" + (" --quick" if options.quick else "")
    print(
        f"## Benchmarks\n\nMachine: {info['cores']} cores ({info['cpu']}), Python "
        f"{info['python']}, Dramatiq {info['dramatiq']}, redis-py {info['redis_py']}, Redis "
        f"{info['redis_server']} on the same machine. Command: `{command}`.\n",
        flush=True,
    )
    started = time.monotonic()
    missed = []
    with progress.steps("benchmarks", len(selected)) as step:
        for name in selected:
            module = importlib.import_module(f"bench.{name}")
            step(0, description=f"benchmark {name}")
            if not progress.is_interactive():
                print(f"<!-- running {name} ... -->", file=sys.stderr, flush=True)
            result = module.run(quick=options.quick, redis_url=redis_url)
            write_result(name, result)
            print(module.summary(result), flush=True)
            missed += [
                f"{name}.{key.removesuffix('_met')}"
                for key, ok in result["targets"].items()
                if key.endswith("_met") and ok is False
            ]
            step()
    print(f"_{len(selected)} benchmark(s) in {time.monotonic() - started:.0f} s; results in "
          f"bench/results/._")  # fmt: skip
    if missed:
        print(f"\nTargets missed: {', '.join(missed)}")
    return 1 if missed and options.strict else 0


if __name__ == "__main__":
    sys.exit(main())
