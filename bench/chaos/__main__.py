"""``python -m bench.chaos`` (``make chaos``): every chaos scenario at full size, a markdown
table of what was lost, duplicated or stuck, and ``bench/results/chaos.json``.

  python -m bench.chaos                       # all scenarios, full size
  python -m bench.chaos --only worker_kills   # one
  python -m bench.chaos --quick               # the sizes make test uses

PostgreSQL: ``--database-url`` (default: the test server at 127.0.0.1:5432) for the scenarios
that do not stop it; ``postgres_outage`` always starts one of its own. Redis: always its own,
with AOF. Exits 1 when any figure is not zero.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SCENARIOS = (
    "worker_kills",
    "redis_restarts",
    "postgres_outage",
    "malformed",
    "dead_child",
    "stalled_worker",
    "poison_job",
    "mismatched_id",
    "dead_worker",
    "redis_stall",
    "redis_full",
    "evicting_redis",
    "postgres_read_only",
    "connection_kills",
)
#: The scenarios of ``bench.chaos.worker_faults`` and ``bench.chaos.store_faults`` (the others
#: are in ``bench.chaos.scenarios``).
WORKER_FAULTS = ("stalled_worker", "poison_job", "mismatched_id", "dead_worker")
STORE_FAULTS = (
    "redis_stall",
    "redis_full",
    "evicting_redis",
    "postgres_read_only",
    "connection_kills",
)
FULL: dict[str, dict[str, Any]] = {
    "worker_kills": {"jobs": 10_000, "kills": 100},
    "redis_restarts": {"jobs": 10_000, "restarts": 3},
    "postgres_outage": {"jobs": 2_000, "down": 60.0},
    "malformed": {"jobs": 2_000, "pairs": 10},
    "dead_child": {"jobs": 2_000},
    "stalled_worker": {"jobs": 200},
    "poison_job": {"jobs": 2_000, "poison": 3},
    "mismatched_id": {"jobs": 2_000, "messages": 10},
    "dead_worker": {"jobs": 200},
    "redis_stall": {"jobs": 2_000, "stalls": 3, "stall": 8.0},
    "redis_full": {"jobs": 2_000, "full": 10.0},
    "evicting_redis": {"jobs": 1},
    "postgres_read_only": {"jobs": 2_000, "down": 30.0},
    "connection_kills": {"jobs": 5_000, "kills": 20},
}
QUICK: dict[str, dict[str, Any]] = {
    "worker_kills": {"jobs": 1_000, "kills": 10},
    "redis_restarts": {"jobs": 3_000, "restarts": 1},
    "postgres_outage": {"jobs": 300, "down": 5.0},
    "malformed": {"jobs": 300, "pairs": 2},
    "dead_child": {"jobs": 300},
    "stalled_worker": {"jobs": 24},
    "poison_job": {"jobs": 100, "poison": 1},
    "mismatched_id": {"jobs": 100, "messages": 2},
    "dead_worker": {"jobs": 10},
    "redis_stall": {"jobs": 200, "stalls": 1, "stall": 2.0},
    "redis_full": {"jobs": 300, "full": 1.5},
    "evicting_redis": {"jobs": 1},
    "postgres_read_only": {"jobs": 200, "down": 3.0},
    "connection_kills": {"jobs": 1_000, "kills": 5},
}


def run(name: str, database_url: str, sizes: dict[str, Any]) -> Any:
    from bench.chaos import scenarios, store_faults, worker_faults

    if name in WORKER_FAULTS:
        return getattr(worker_faults, name)(database_url, **sizes)
    if name in STORE_FAULTS:
        return getattr(store_faults, name)(database_url, **sizes)
    if name == "postgres_outage":
        return scenarios.postgres_outage(**sizes)
    return getattr(scenarios, name)(database_url, **sizes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="run only these")
    parser.add_argument("--quick", action="store_true", help="the bounded sizes of make test")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    options = parser.parse_args(argv)

    from bench.chaos.scenarios import stores  # noqa: F401  (fail early on a broken install)
    from bench.common import markdown_table, write_result

    sizes = QUICK if options.quick else FULL
    rows = []
    for name in options.only or SCENARIOS:
        print(f"chaos: {name} {sizes[name]} ...", file=sys.stderr, flush=True)
        row = run(name, options.database_url, sizes[name])
        rows.append(row)
        print(f"chaos: {row}", file=sys.stderr, flush=True)
    headers = [
        "scenario",
        "jobs",
        "faults",
        "lost",
        "duplicated",
        "stuck",
        "extra attempts",
        "recovery s",
        "late",
        "seconds",
    ]
    print(
        markdown_table(
            headers,
            [
                [
                    r.scenario,
                    f"{r.jobs:,}",
                    r.faults,
                    r.lost,
                    r.duplicated,
                    r.stuck,
                    r.extra_attempts,
                    "-" if r.recovery_s is None else r.recovery_s,
                    r.late,
                    r.seconds,
                ]
                for r in rows
            ],
        )
    )
    write_result("chaos", {"quick": options.quick, "rows": [r.as_dict() for r in rows]})
    bad = [r for r in rows if r.lost or r.duplicated or r.stuck or r.extra_attempts or r.late]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
