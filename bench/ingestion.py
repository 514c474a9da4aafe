"""Ingestion benchmarks: throughput, fairness and a worker's peak memory.

  python -m bench.ingestion            # 1,000 documents / 10 tenants, a 500-document import
  python -m bench.ingestion --quick    # 200 documents, a 100-document import
  python -m bench.ingestion --only memory
  python -m bench.ingestion --only rounds --documents 400 --rounds 5

Everything runs on the embedded PostgreSQL 18 with pgvector (started in a temporary
directory, migrated) and Redis (``BENCH_REDIS_URL``, default db 14, a fresh key namespace,
deleted afterwards). The workers are real worker processes serving the fast tier (where
ingestion runs, one document at a time per organization) with the production platform
(``bootstrap()``) and the hashing embedder. Documents are submitted the way the upload route
does it: ``store.add_document`` and a commit, then ``router.enqueue`` of
``ingest-document-<id>``.

1. **Throughput**: 1,000 mixed documents (text, Markdown, HTML, DOCX; 1 to 96 kB of text)
   across 10 tenants, queued before the workers start; documents/s, chunks/s and chunk
   tokens/min from the start signal until every document is ready or failed. Against it,
   the **sequential ceiling** of this machine: the same documents ingested one after another
   by the same pipeline function in one process (extract, split, embed, write), with the
   time of each step.
2. **Fairness**: 5 tenants upload one document each (4 rounds) while another tenant's
   500-document import runs, against the same uploads on an idle system; upload-to-ready
   per document (polled every 20 ms), p50/p95/max.
3. **Peak memory**: a fresh worker process (one thread) ingests one 10 MiB text file; its
   VmHWM before and after; then :mod:`bench.ingestion_memory` measures the peak of each
   step in a fresh process; ``--profile-memory`` also replays the
   ingestion under tracemalloc and names the code holding the memory.
4. **Rounds** (only when asked for: ``--only rounds``): the workers against the indexer
   (the same documents written into a table like ``kb_chunks`` by a pipeline that adds
   nothing) and the bare pipelined ceiling, ``--rounds`` times, the order alternating and
   every phase starting from a vacuumed, checkpointed database
   (:mod:`bench.ingestion_rounds`): workers / indexer with its median and spread; with
   ``--by-thread``, the workers' CPU and context switches a job by kind of thread
   (:mod:`bench.thread_split`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import REDIS_URL, connect, interrupt_on_sigterm, machine, rnd, write_result

NAME = "ingestion"
DEFAULTS: dict[str, Any] = {
    "documents": 1_000,
    "tenants": 10,
    "processes": 2,
    "threads": 4,
    "import_documents": 500,
    "small_tenants": 5,
    "fairness_rounds": 4,
    "memory_bytes": 10 * 1024 * 1024,
    "poll_ms": 100,
    "rounds": 5,
}
QUICK = {"documents": 200, "import_documents": 100, "fairness_rounds": 2}
PARTS = ("throughput", "fairness", "memory", "rounds")
#: What a run without ``--only`` measures (rounds repeat the throughput's phases: on demand).
DEFAULT_PARTS = ("throughput", "fairness", "memory")


def run(
    *,
    quick: bool = False,
    redis_url: str = REDIS_URL,
    only: Sequence[str] = DEFAULT_PARTS,
    profile_memory: bool = False,
    say: Any = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Run the selected parts; the result (``targets`` holds the verdicts)."""
    settings = dict(DEFAULTS) | (QUICK if quick else {})
    settings |= {k: v for k, v in overrides.items() if v is not None}
    say = say or (lambda line: print(f"<!-- {line} -->", file=sys.stderr, flush=True))
    client = connect(redis_url)
    result: dict[str, Any] = {
        "machine": machine(client),
        "load_average_1m_at_start": rnd(os.getloadavg()[0], 2),
        "settings": settings,
        "targets": {},
    }
    client.close()
    from bench import ingestion_fairness, ingestion_memory, ingestion_rounds, ingestion_throughput
    from bench.ingestion_stack import stack

    with stack(redis_url, settings["poll_ms"]) as env:
        if "throughput" in only:
            throughput = ingestion_throughput.measure_throughput(env, settings, say)
            result["throughput"] = throughput
            # the goal: the platform at >= 0.8x this run's pipelined ceiling
            result["targets"]["ceiling_met"] = throughput["ratio_to_ceiling_pipelined"] >= 0.8
        if "rounds" in only:
            rounds = result["rounds"] = ingestion_rounds.measure_rounds(env, settings, say)
            result["targets"]["indexer_ratio_met"] = rounds["workers_to_indexer"]["median"] >= 0.9
        if "fairness" in only:
            result["fairness"] = ingestion_fairness.measure_fairness(env, settings, say)
        if "memory" in only:
            memory = result["memory"] = ingestion_memory.measure_memory(env, settings, say)
            memory_met = memory["peak_mb"] < ingestion_memory.MEMORY_TARGET_MB
            result["targets"]["memory_met"] = memory_met
            # The peak of each step, always: the margin under the target is worth seeing.
            say("memory: peaks per step" + (" and tracemalloc" if profile_memory else ""))
            memory["profile"] = ingestion_memory.profile(
                env, settings["memory_bytes"], trace=profile_memory
            )
    result["load_average_1m_at_end"] = rnd(os.getloadavg()[0], 2)
    return result


def summary(result: dict[str, Any]) -> str:
    lines = ["### Ingestion", ""]
    info = result["machine"]
    lines.append(
        f"{info['cores']} cores ({info['cpu']}); embedded PostgreSQL 18 with pgvector, Redis "
        f"{info['redis_server']}; hashing embedder; load average "
        f"{result['load_average_1m_at_start']} at the start. Tokens are chunk tokens "
        "(cl100k), overlaps included."
    )
    from bench import ingestion_fairness, ingestion_memory, ingestion_rounds, ingestion_throughput

    if "rounds" in result:
        lines += ["", *ingestion_rounds.summary_lines(result["rounds"])]
    if "throughput" in result:
        lines += ["", *ingestion_throughput.summary_lines(result["throughput"], result["settings"])]
    if "fairness" in result:
        lines += ["", *ingestion_fairness.summary_lines(result["fairness"])]
    if "memory" in result:
        lines += ["", *ingestion_memory.summary_lines(result["memory"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingestion",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smaller run for smoke checking")
    parser.add_argument("--only", action="append", choices=PARTS, help="run only these")
    parser.add_argument("--documents", type=int, help="throughput documents (default 1,000)")
    parser.add_argument("--processes", type=int, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, help="threads per worker process (default 4)")
    parser.add_argument("--rounds", type=int, help="rounds of --only rounds (default 5)")
    parser.add_argument(
        "--poll-ms",
        type=int,
        help="the workers' SPEEDTIER_WORKER_POLL_MS (default 100; the platform's default is 500)",
    )
    parser.add_argument(
        "--profile-memory",
        action="store_true",
        help="also attribute the 10 MiB ingestion's memory with tracemalloc (about 15 min; "
        "the peak of each step is always measured)",
    )
    parser.add_argument(
        "--count-by-bisection",
        action="store_true",
        help="count chunk tokens the old way (bisecting the splitter): the before figure",
    )
    parser.add_argument(
        "--by-thread",
        action="store_true",
        default=None,
        help="--only rounds: split the workers' CPU a job by kind of thread",
    )
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    if options.count_by_bisection:
        from bench.ingestion_ceiling import BISECTION_VARIABLE, apply_token_count_mode

        os.environ[BISECTION_VARIABLE] = "1"
        apply_token_count_mode()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url or REDIS_URL,
        only=options.only or DEFAULT_PARTS,
        profile_memory=options.profile_memory,
        documents=options.documents,
        processes=options.processes,
        threads=options.threads,
        rounds=options.rounds,
        poll_ms=options.poll_ms,
        by_thread=options.by_thread,
    )
    result["command"] = "python -m bench.ingestion " + " ".join(argv or sys.argv[1:])
    path = write_result(NAME, result)
    print(summary(result))
    print(f"\n_Results in {path.relative_to(path.parent.parent.parent)}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
