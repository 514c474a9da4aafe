"""A day of daily agent evaluation reports as a benchmark (``testkit/reports_scenario.py``):
the 04:00 and 20:00 UTC ticks of one simulated day (each emitted twice) for 50 organizations
in 12 time zones, admin sends with email, Slack 500/429 and a Rails 500 injected, one worker
process SIGKILLed mid-run, on real worker processes.

  python -m bench.reports_day                        # 50 organizations, 2 workers x 4 threads
  python -m bench.reports_day --organizations 200 --workers 4

Prints the figures and whether every report went out exactly once per channel; writes
``bench/results/reports_day.json``. Redis: ``BENCH_REDIS_URL`` or ``--redis-url`` (default
``redis://127.0.0.1:6379/14``); PostgreSQL: ``TEST_DATABASE_URL`` / ``DATABASE_URL`` (a fresh
database is created and dropped).
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "reports_day"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reports_day", description=__doc__)
    parser.add_argument("--organizations", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--admin-sends", type=int, default=10)
    parser.add_argument("--no-kill", action="store_true", help="do not kill a worker mid-run")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)

    from bench.common import REDIS_URL, write_result
    from testkit.reports_scenario import DayConfig, run_day

    config = DayConfig(
        organizations=options.organizations,
        workers=options.workers,
        threads=options.threads,
        admin_sends=options.admin_sends,
        kill_a_worker=not options.no_kill,
    )
    result = run_day(config, options.redis_url or REDIS_URL)
    write_result(NAME, result)
    print(json.dumps(result, indent=2, default=str))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
