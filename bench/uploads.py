"""Conversation uploads end to end as a benchmark (``testkit/uploads_scenario.py``): direct
XCALLY uploads across organizations processed natively on real worker processes, each
handing its XCALLY completion off itself (5% of those enqueues refused once), 5% of Rails'
process hand-offs failing in transport, 1% of responses lost, 5% of Rails'
``complete_conversation_sync`` calls answering 500 and 5% corrupt recordings.

  python -m bench.uploads                          # 2,000 uploads, 20 organizations
  python -m bench.uploads --uploads 200 --workers 1

Prints the figures and the verdicts (every upload completed or failed with a reason, every
ledger row terminal, one native sync_completion row per completed upload, one recording per
call detail, one completion per conversation); writes
``bench/results/uploads.json``. Redis: ``BENCH_REDIS_URL`` or ``--redis-url``; PostgreSQL:
``TEST_DATABASE_URL`` / ``DATABASE_URL`` (a fresh database is created and dropped).
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "uploads"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.uploads", description=__doc__)
    parser.add_argument("--uploads", type=int, default=2000)
    parser.add_argument("--organizations", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)

    from bench.common import REDIS_URL, write_result
    from testkit.uploads_scenario import UploadsConfig, run_uploads

    config = UploadsConfig(
        uploads=options.uploads,
        organizations=options.organizations,
        workers=options.workers,
        threads=options.threads,
    )
    result = run_uploads(config, options.redis_url or REDIS_URL)
    write_result(NAME, result)
    print(json.dumps(result, indent=2, default=str))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
