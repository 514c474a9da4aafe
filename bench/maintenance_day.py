"""A day of seed 001's maintenance ticks as a benchmark (``testkit/maintenance_scenario.py``):
every Unit21, expired-evaluation and counter-cache tick of one simulated UTC day (each
emitted twice), on real worker processes, one SIGKILLed between two repair steps and one
counter-cache run contended by a concurrent holder of the advisory lock.

  python -m bench.maintenance_day                       # 50 organizations x 2 Unit21 sources
  python -m bench.maintenance_day --organizations 200 --workers 4

Prints the figures and the checks' verdicts; writes ``bench/results/maintenance_day.json``.
Redis: ``BENCH_REDIS_URL`` or ``--redis-url`` (default ``redis://127.0.0.1:6379/14``);
PostgreSQL: ``TEST_DATABASE_URL`` / ``DATABASE_URL`` (a fresh database, dropped after).
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "maintenance_day"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.maintenance_day", description=__doc__)
    parser.add_argument("--organizations", type=int, default=50)
    parser.add_argument("--sources", type=int, default=2, help="Unit21 sources per organization")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--no-kill", action="store_true", help="do not kill a worker")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)

    from bench.common import REDIS_URL, write_result
    from testkit.maintenance_scenario import MaintenanceDay, run_day

    config = MaintenanceDay(
        organizations=options.organizations,
        sources_per_organization=options.sources,
        workers=options.workers,
        threads=options.threads,
        kill_a_worker=not options.no_kill,
    )
    result = run_day(config, options.redis_url or REDIS_URL)
    write_result(NAME, result)
    print(json.dumps(result, indent=2, default=str))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
