"""Fairness: 5 tenants upload one document each while another tenant's 500-document import
runs, against the same uploads on an idle system (upload-to-ready, polled every 20 ms)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.common import markdown_table, percentile, rnd
from bench.ingestion_stack import (
    SETTLE_TIMEOUT,
    Stack,
    knowledge_bases,
    outcome,
    statuses,
    submit,
    wait_settled,
    workers,
)


def upload_to_ready(
    env: Stack, items: Sequence[tuple[int, Any]], bases: dict[int, int], timeout: float = 300.0
) -> list[float]:
    """Upload each item on its own (commit, enqueue) as the route does, then poll every 20 ms:
    seconds from each upload to the first poll that sees it ready."""
    uploaded: dict[int, float] = {}
    for item in items:
        at = time.monotonic()
        (doc_id,) = submit(env, [item], bases)
        uploaded[doc_id] = at
    seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(uploaded):
        now = time.monotonic()
        for doc_id, status in statuses(env, [i for i in uploaded if i not in seen]).items():
            if status != "processing":
                if status != "ready":
                    raise RuntimeError(f"fairness upload {doc_id} ended {status}")
                seen[doc_id] = now - uploaded[doc_id]
        if now > deadline:
            raise TimeoutError("fairness uploads did not get ready")
        time.sleep(0.02)
    return [seen[doc_id] for doc_id in uploaded]


def _latency(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_s": rnd(percentile(samples, 50)),
        "p95_s": rnd(percentile(samples, 95)),
        "max_s": rnd(max(samples)),
    }


def measure_fairness(env: Stack, settings: dict[str, Any], say: Any) -> dict[str, Any]:
    from bench.ingestion_corpus import corpus

    small, rounds = settings["small_tenants"], settings["fairness_rounds"]
    uploads = corpus(small, seed=77, prefix="upload")
    idle_orgs = list(range(201, 201 + small))
    loaded_orgs = list(range(211, 211 + small))
    warm_orgs = list(range(221, 221 + 2 * small))
    importer = 200
    bases = knowledge_bases(env, [importer, *idle_orgs, *loaded_orgs, *warm_orgs])
    imports = corpus(settings["import_documents"], seed=5, prefix="import")

    def round_items(orgs: list[int], number: int) -> list[tuple[int, Any]]:
        return [
            (org, _renamed(doc, f"round{number}-{doc.name}"))
            for org, doc in zip(orgs, uploads, strict=True)
        ]

    with workers(env, settings["processes"], settings["threads"], "fairness") as pool:
        pool.go()
        # Warm-up, not measured: each process's first documents pay its lazy imports and
        # caches, which neither condition should.
        pairs = zip(warm_orgs, uploads * 2, strict=True)
        warm = [(org, _renamed(doc, f"warm-{org}")) for org, doc in pairs]
        upload_to_ready(env, warm, bases)
        time.sleep(2.0)  # the idle workers back off to their poll interval
        idle: list[float] = []
        for number in range(rounds):
            idle += upload_to_ready(env, round_items(idle_orgs, number), bases)
            time.sleep(0.5)
        say(f"fairness idle: p95 {percentile(idle, 95):.3f} s")
        import_started = time.time()
        import_ids = submit(env, [(importer, doc) for doc in imports], bases)
        loaded: list[float] = []
        backlog: list[int] = []
        for number in range(rounds):
            backlog.append(list(statuses(env, import_ids).values()).count("processing"))
            loaded += upload_to_ready(env, round_items(loaded_orgs, number), bases)
            time.sleep(0.5)
        backlog.append(list(statuses(env, import_ids).values()).count("processing"))
        say(f"fairness loaded: p95 {percentile(loaded, 95):.3f} s; backlog {backlog}")
        import_seconds = wait_settled(env, import_ids, SETTLE_TIMEOUT) - import_started
    imported = outcome(env, import_ids, [importer])
    idle_stats, loaded_stats = _latency(idle), _latency(loaded)
    return {
        "small_tenants": small,
        "rounds": rounds,
        "import_documents": len(imports),
        "idle": idle_stats,
        "during_import": loaded_stats,
        "p95_ratio": rnd(loaded_stats["p95_s"] / idle_stats["p95_s"], 2),
        "import_backlog_at_each_round": backlog,
        "import_seconds": rnd(import_seconds, 1),
        "import_documents_per_second": rnd(len(imports) / import_seconds, 2),
        "import": imported,
    }


def _renamed(doc: Any, name: str) -> Any:
    from dataclasses import replace

    return replace(doc, name=name)


def summary_lines(f: dict[str, Any]) -> list[str]:
    rows = [
        ["idle system", f["idle"]["n"], f["idle"]["p50_s"], f["idle"]["p95_s"], f["idle"]["max_s"]],
        [
            f"during a {f['import_documents']}-document import",
            f["during_import"]["n"],
            f["during_import"]["p50_s"],
            f["during_import"]["p95_s"],
            f["during_import"]["max_s"],
        ],
    ]
    return [
        f"**Fairness**: {f['small_tenants']} tenants upload one document each, "
        f"{f['rounds']} rounds; upload-to-ready seconds:",
        "",
        markdown_table(["condition", "uploads", "p50", "p95", "max"], rows),
        "",
        f"p95 during the import is {f['p95_ratio']}x the idle p95; the import still had "
        f"{f['import_backlog_at_each_round']} documents processing at each round and took "
        f"{f['import_seconds']} s ({f['import_documents_per_second']} documents/s, one at a "
        "time for its tenant).",
    ]
