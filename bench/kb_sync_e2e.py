"""Knowledge sync end to end as a benchmark: a Notion workspace and a website synced for
several organizations at once by real worker processes (the scenario of
``tests/e2e/test_knowledge_sync_e2e.py``; see ``testkit/kb_scenario.py``).

  python -m bench.kb_sync_e2e                    # 3 organizations, 500 Notion pages, 300-page sites
  python -m bench.kb_sync_e2e --host-rate 1/1    # production crawl politeness (>= 300 s)

Prints wall time, documents/s, chunks written, jobs run, delays, failures and, per window
family, the most starts one window admitted against its limit; writes
``bench/results/kb_sync_e2e.json``. Redis: ``BENCH_REDIS_URL`` or ``--redis-url`` (default
``redis://127.0.0.1:6379/14``); PostgreSQL: ``TEST_DATABASE_URL`` / ``DATABASE_URL`` (a
fresh database is created and dropped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from testkit.kb_scenario import DEFAULT_WINDOWS, ScenarioConfig, run_scenario

NAME = "kb_sync_e2e"


def summary(result: dict[str, Any]) -> str:
    from bench.common import markdown_table

    config = result["config"]
    lines = [
        f"### Knowledge sync end to end ({config['organizations']} organizations, "
        f"{config['notion_pages']} Notion pages and a {config['site_pages']}-page site each)",
        "",
        f"Wall time {result['wall_seconds']} s from the tick to the last settled job; "
        f"{result['documents']} documents ({result['documents_per_second']} documents/s), "
        f"{result['chunks_written']} chunks written, {result['jobs_run']} job runs, "
        f"{result['delays']} delays (window or politeness), {len(result['failed_jobs'])} "
        f"failed and {len(result['retried_jobs'])} retried jobs; {result['cores']} cores, "
        f"load average {result['load_average_1m']['at_tick']:.1f} at the tick and "
        f"{result['load_average_1m']['at_settle']:.1f} at the end"
        + (" — STALLED: jobs still live at the timeout" if result["stalled"] else "")
        + ".",
        "",
    ]
    rows = [
        [
            row["family"],
            row["provider"],
            f"{row['limit']}/{row['period_seconds']:g}s",
            row["scopes"],
            row["starts"],
            row["max_starts_per_window"],
            "-" if row["admitted_runs"] is None else row["admitted_runs"],
            "-"
            if row["max_admitted_runs_per_window"] is None
            else row["max_admitted_runs_per_window"],
            row["full_windows"],
            "-" if row["provider_requests"] is None else row["provider_requests"],
            "-"
            if row["provider_max_per_aligned_window"] is None
            else row["provider_max_per_aligned_window"],
            "-"
            if row["provider_max_per_sliding_period"] is None
            else row["provider_max_per_sliding_period"],
        ]
        for row in result["window_families"]
    ]
    lines.append(
        markdown_table(
            [
                "window family",
                "provider",
                "limit",
                "scopes",
                "counted starts",
                "max counted/window",
                "admitted runs",
                "max runs/window",
                "full windows",
                "provider requests",
                "provider max/aligned window",
                "provider max/sliding period",
            ],
            rows,
        )
    )
    job_rows = [
        [family, jobs["runs"], json.dumps(jobs["records"]), json.dumps(jobs["outcomes"])]
        for family, jobs in result["jobs"].items()
    ]
    lines += ["", markdown_table(["family", "runs", "final states", "run outcomes"], job_rows)]
    lines += [
        "",
        "Counted starts and max counted/window come from the Redis window counters (sampled "
        f"every 0.1 s, longest gap {result['window_sampler']['longest_gap_s']} s); provider "
        "windows count reservations for future windows too, including those whose job woke "
        "too late and was counted again. Admitted runs and max runs/window are exact: each "
        "run admitted by a provider window carries the window that counted it. The provider "
        "columns come from the fakes' "
        "request logs (Notion page fetches per organization, page GETs per site host). The "
        "windows bound starts, not requests: a run admitted late in one window may reach "
        "the provider in the next (on a busy machine hundreds of ms later), so the provider "
        "can see more than the limit in one aligned or sliding period while no window "
        "admitted more. Crawl politeness was "
        f"{config['host_rate']} per host"
        + (" (production: 1/1)." if config["host_rate"] != "1/1" else " (production's rule)."),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.kb_sync_e2e",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--organizations", type=int, default=3)
    parser.add_argument("--notion-pages", type=int, default=500)
    parser.add_argument("--site-pages", type=int, default=300)
    parser.add_argument(
        "--host-rate", default="10/1", help="crawl politeness per host (production: 1/1)"
    )
    parser.add_argument(
        "--windows",
        default=json.dumps(DEFAULT_WINDOWS),
        help="SPEEDTIER_WINDOWS as JSON (default: %(default)s)",
    )
    parser.add_argument("--slow-processes", type=int, default=2)
    parser.add_argument("--slow-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=None, help="seconds to settle")
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)

    from bench.common import LOG_DIR, REDIS_URL, interrupt_on_sigterm, write_result

    interrupt_on_sigterm()
    pages = options.site_pages
    rate = options.host_rate.split("/")
    crawl_floor = pages * float(rate[1]) / int(rate[0])
    config = ScenarioConfig(
        organizations=options.organizations,
        notion_pages=options.notion_pages,
        site_pages=pages,
        max_urls=max(400, pages + 100),
        windows=json.loads(options.windows),
        host_rate=options.host_rate,
        slow_processes=options.slow_processes,
        slow_threads=options.slow_threads,
        timeout=options.timeout or max(300.0, 2 * crawl_floor + 120),
    )
    started = time.monotonic()
    result = run_scenario(
        config,
        redis_url=options.redis_url or REDIS_URL,
        log_dir=LOG_DIR / NAME,
        say=lambda line: print(f"<!-- {line} -->", file=sys.stderr, flush=True),
    )
    result["command"] = "python -m bench.kb_sync_e2e " + " ".join(argv or sys.argv[1:])
    result["total_seconds"] = round(time.monotonic() - started, 1)
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path.relative_to(path.parent.parent.parent)}._")
    return 1 if result["failed_jobs"] or result["stalled"] else 0


if __name__ == "__main__":
    sys.exit(main())
