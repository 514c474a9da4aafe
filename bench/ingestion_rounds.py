"""Ingestion against what searchable rows cost, over rounds: the workers, the bare pipelined
ceiling and the indexer, each round on the same documents, the order alternating.

- **workers**: the real worker processes ingest the documents (submitted the way the upload
  route does it, then started together), as in :mod:`bench.ingestion_throughput`;
- **bare ceiling**: extract, split, embed and ``COPY`` into a table with no index, over two
  processes (:mod:`bench.ingestion_ceiling`);
- **indexer**: the same into a table made like ``api2.kb_chunks`` (its generated columns and
  indexes), with one writer and with two; the better of the two is the indexer.

The ratio this measures is **workers / indexer** (the indexer's time over the workers'):
what the platform adds to what any writer of searchable rows pays. Workers / bare ceiling
is printed beside it.

What keeps the comparison fair, round after round:

- every phase starts from the same state: the platform's documents, chunks, versions and
  usage events of the previous round are truncated, each ceiling writes into a new table,
  and ``VACUUM (ANALYZE)`` and ``CHECKPOINT`` run before each phase, so no phase meets the
  previous one's autovacuum, dirty buffers or bigger indexes;
- the order alternates (workers first in even rounds, the ceilings first in odd ones), so a
  drift of the machine over a round favours neither side;
- each phase's processes pay their one-off costs (imports, the token counter) before its
  start signal (:func:`bench.ingestion_ceiling.warm_up`); the workers start serving before
  the jobs are enqueued, and their clock runs from the enqueue.

Other people's load still moves single rounds: the medians and the spread are the figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from bench import thread_split
from bench.common import (
    command_calls,
    command_delta,
    commands_per_job,
    markdown_table,
    rnd,
)
from bench.ingestion_stack import (
    SETTLE_TIMEOUT,
    Stack,
    enqueue_jobs,
    knowledge_bases,
    last_settle,
    outcome,
    submit,
    wait_settled,
    workers,
)
from testkit import thread_counts

#: Tables of the platform emptied before each workers phase (documents cascade to their
#: chunks and versions).
PLATFORM_TABLES = ("api2.kb_documents", "api2.usage_events")
#: The least time the workers get to start serving before the jobs are enqueued.
WORKERS_START_SECONDS = 2.0


def _dsn(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://", 1)


def settle_database(database_url: str, *, truncate: bool = False) -> None:
    """Empty the platform's ingestion tables (``truncate``), then vacuum, analyse and
    checkpoint: the next phase starts with no dead rows, fresh statistics and no dirty
    buffers left by the previous one."""
    import psycopg

    with psycopg.connect(_dsn(database_url), autocommit=True) as connection:
        if truncate:
            connection.execute(f"TRUNCATE {', '.join(PLATFORM_TABLES)} CASCADE")
        connection.execute("VACUUM (ANALYZE)")
        connection.execute("CHECKPOINT")


def _workers(
    env: Stack, settings: dict[str, Any], items: Sequence[tuple[int, Any]], bases: dict[int, int]
) -> dict[str, Any]:
    organizations = sorted(bases)
    settle_database(env.values["database_url"], truncate=True)
    by_thread = settings.get("by_thread", False)
    target = None
    if by_thread:
        thread_split.clear()
        target = thread_split.split_ingestion_worker_main
    with workers(env, settings["processes"], settings["threads"], "rounds", target) as pool:
        # The workers start serving (the collector tuned, consumers running) on an empty
        # queue; the documents are stored, the database settled, then the jobs enqueued:
        # the clock and the CPU count run from the enqueue, as a ceiling's run from the
        # moment its processes are ready.
        pool.go()
        ids = submit(env, items, bases, enqueue=False)
        settle_database(env.values["database_url"])
        time.sleep(WORKERS_START_SECONDS)
        database_before, cpu_before = env.postgres_cpu_seconds(), pool.cpu_seconds()
        redis_client = env.platform.broker.client  # the stack's own connection pool
        calls_before = command_calls(redis_client)
        started = time.time()
        enqueue_jobs(
            env, [(org, doc_id) for (org, _), doc_id in zip(items, ids, strict=True)], bases
        )
        seen = wait_settled(env, ids, SETTLE_TIMEOUT)
        database = env.postgres_cpu_seconds() - database_before
        client = pool.cpu_seconds() - cpu_before
        calls = commands_per_job(command_delta(calls_before, command_calls(redis_client)), len(ids))
    # The last job's settle, not the poll that saw it: a ceiling's clock stops at its
    # writers' last commit, not up to a polling interval later.
    wall = last_settle(env, ids, seen) - started
    result = outcome(env, ids, organizations)
    if result["ready"] != len(ids):
        raise RuntimeError(f"not every document became ready: {result}")
    split = {"by_thread": thread_split.measured()} if by_thread else {}
    return {
        **split,
        "wall_seconds": rnd(wall, 2),
        "tokens": result["tokens"],
        "chunks": result["chunks"],
        "tokens_per_minute": round(result["tokens"] / wall * 60),
        "client_cpu_seconds": rnd(client, 1),
        "postgres_cpu_seconds": rnd(database, 1),
        "cpu_seconds_per_million_tokens": rnd((client + database) / result["tokens"] * 1e6, 2),
        # Server-wide counts: the workers' calls, and the bench's own enqueue's and polls'.
        "script_calls_per_document": calls["script_calls_per_job"],
    }


def _ceilings(env: Stack, documents: Sequence[Any], say: Any) -> dict[str, Any]:
    from bench.ingestion_ceiling import measure_pipelined
    from services.indexing.embedders import DEFAULT_HASHING_DIMENSIONS

    url, clock = env.values["database_url"], env.postgres_cpu_seconds
    runs: dict[str, Any] = {}
    for name, indexed, writers in (
        ("bare", False, 1),
        ("indexer_1", True, 1),
        ("indexer_2", True, 2),
    ):
        settle_database(url)
        runs[name] = measure_pipelined(
            url, documents, DEFAULT_HASHING_DIMENSIONS, clock, indexed=indexed, writers=writers
        )
        say(f"  {name}: {runs[name]['wall_seconds']} s")
    return runs


def measure_rounds(env: Stack, settings: dict[str, Any], say: Any) -> dict[str, Any]:
    """``settings['rounds']`` rounds of the workers, the bare ceiling and the indexer on
    ``settings['documents']`` documents, alternating which goes first."""
    from bench.ingestion_corpus import corpus

    count, tenants = settings["documents"], settings["tenants"]
    documents = corpus(count)
    organizations = list(range(1, tenants + 1))
    bases = knowledge_bases(env, organizations)
    items = [(organizations[i % tenants], doc) for i, doc in enumerate(documents)]
    rounds = []
    for number in range(settings["rounds"]):
        workers_first = number % 2 == 0
        say(f"round {number + 1}: {'workers first' if workers_first else 'ceilings first'}")
        started = time.monotonic()
        if workers_first:
            platform = _workers(env, settings, items, bases)
            say(f"  workers: {platform['wall_seconds']} s")
            ceilings = _ceilings(env, documents, say)
        else:
            ceilings = _ceilings(env, documents, say)
            platform = _workers(env, settings, items, bases)
            say(f"  workers: {platform['wall_seconds']} s")
        rounds.append(_round(number, workers_first, platform, ceilings))
        say(
            f"  workers / indexer {rounds[-1]['workers_to_indexer']}, workers / bare "
            f"{rounds[-1]['workers_to_bare']} ({time.monotonic() - started:.0f} s)"
        )
    return {"documents": count, "tenants": tenants, "rounds": rounds, **_spread(rounds)}


def _round(
    number: int, workers_first: bool, platform: dict[str, Any], ceilings: dict[str, Any]
) -> dict[str, Any]:
    indexer_name = min(("indexer_1", "indexer_2"), key=lambda n: ceilings[n]["wall_seconds"])
    indexer, bare = ceilings[indexer_name], ceilings["bare"]
    return {
        "round": number + 1,
        "workers_first": workers_first,
        "workers": platform,
        **ceilings,
        "indexer": indexer_name,
        "workers_to_indexer": rnd(indexer["wall_seconds"] / platform["wall_seconds"], 2),
        "workers_to_bare": rnd(bare["wall_seconds"] / platform["wall_seconds"], 2),
        "indexer_to_bare": rnd(bare["wall_seconds"] / indexer["wall_seconds"], 2),
        "cpu_per_token_to_indexer": rnd(
            platform["cpu_seconds_per_million_tokens"] / indexer["cpu_seconds_per_million_tokens"],
            2,
        ),
    }


RATIOS = ("workers_to_indexer", "workers_to_bare", "indexer_to_bare", "cpu_per_token_to_indexer")


def _spread(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        ratio: {
            "median": rnd(statistics.median(r[ratio] for r in rounds), 2),
            "min": min(r[ratio] for r in rounds),
            "max": max(r[ratio] for r in rounds),
        }
        for ratio in RATIOS
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            r["round"],
            "workers" if r["workers_first"] else "ceilings",
            r["workers"]["wall_seconds"],
            r["bare"]["wall_seconds"],
            f"{r[r['indexer']]['wall_seconds']} ({r['indexer'][-1]})",
            f"**{r['workers_to_indexer']}**",
            r["workers_to_bare"],
            r["indexer_to_bare"],
            r["cpu_per_token_to_indexer"],
        ]
        for r in result["rounds"]
    ]
    spread = {k: result[k] for k in RATIOS}

    def said(ratio: str) -> str:
        s = spread[ratio]
        return f"{s['median']} (range {s['min']}-{s['max']})"

    return [
        f"**Against the indexer**: {result['documents']} documents across "
        f"{result['tenants']} tenants, {len(result['rounds'])} rounds, the order alternating.",
        "",
        markdown_table(
            [
                "round",
                "first",
                "workers, s",
                "bare ceiling, s",
                "indexer, s (writers)",
                "workers / indexer",
                "workers / bare ceiling",
                "indexer / bare ceiling",
                "CPU per token, workers / indexer",
            ],
            rows,
        ),
        "",
        f"Median **workers / indexer {said('workers_to_indexer')}** (the goal: >= 0.9); "
        f"workers / bare ceiling {said('workers_to_bare')}; indexer / bare ceiling "
        f"{said('indexer_to_bare')}; CPU per token, workers over indexer "
        f"{said('cpu_per_token_to_indexer')}; Redis script calls a document in the workers' "
        f"phase (the enqueue's included): {_calls(result['rounds'])}.",
        *_by_thread_lines(result["rounds"]),
    ]


def _calls(rounds: Sequence[dict[str, Any]]) -> str:
    calls = [r["workers"].get("script_calls_per_document") for r in rounds]
    known = [c for c in calls if c is not None]
    if not known:
        return "not counted"
    return f"{rnd(statistics.median(known), 2)} (range {min(known)}-{max(known)})"


def _by_thread_lines(rounds: Sequence[dict[str, Any]]) -> list[str]:
    """The workers' threads' CPU and context switches a job (a document's), by kind of
    thread, medians over the rounds (``--by-thread``); none without it."""
    splits = [r["workers"]["by_thread"] for r in rounds if r["workers"].get("by_thread")]
    if not splits:
        return []
    rows = [
        [kind, *(figures[key] for key in thread_counts.FIGURES)]
        for kind, figures in thread_counts.medians(splits).items()
    ]
    return [
        "",
        "**The workers by thread**, a job (medians of the rounds; the sampler, `probe`, is part "
        "of the workers' CPU):",
        "",
        markdown_table(
            ["thread", "CPU µs", "of it the kernel's", "voluntary switches", "involuntary"], rows
        ),
    ]
