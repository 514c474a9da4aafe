"""The report of :mod:`bench.search`: its Markdown table and notes."""

from __future__ import annotations

from typing import Any

from bench.common import markdown_table, verdict

_WAYS = {
    "hybrid": "`search()`: hybrid (vector + full text, RRF, snippets)",
    "vector": "vector ranking alone, as planned",
    "hnsw_iterative": "vector ranking forced onto HNSW (iterative scan, ef_search 200)",
    "naive": "HNSW then filter (pgvector defaults)",
}


def _rows(organizations: dict[str, Any], space: str) -> list[list[Any]]:
    rows = []
    for label, org in organizations.items():
        for way, name in _WAYS.items():
            if way not in org:
                continue
            m = org[way]
            path = f" [{org['paths'][way]}]" if way in org["paths"] else ""
            cell = f"{m['recall_at_10']:.3f}" if "recall_at_10" in m else "n/a"
            rows.append(
                [space, f"{label} ({org['rows']:,} rows)", name + path, m["p50_ms"],
                 m["p95_ms"], m["p99_ms"], cell, " to ".join(map(str, org["load_average"]))]
            )  # fmt: skip
    return rows


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f}"


def summary(result: dict[str, Any]) -> str:
    s, target, timings = result["settings"], result["targets"], result["timings"]
    rows: list[list[Any]] = []
    for space in ("hashing", "clustered"):
        if result.get(space):
            rows += _rows(result[space]["organizations"], space)
    table = markdown_table(
        ["vectors", "organization", "query", "p50 ms", "p95 ms", "p99 ms", "recall@10",
         "load avg"],
        rows,
    )  # fmt: skip
    measured = result.get("hashing") or result.get("clustered") or {}
    sizes = measured.get("relation_bytes", {})
    memory = measured.get("memory", {})
    notes = [
        f"{s['chunks']:,} chunks over {s['organizations']} organizations, {s['queries']} "
        f"queries per organization; PostgreSQL {result['server']['postgresql']}, pgvector "
        f"{result['server']['pgvector']} (embedded); exact path up to "
        f"{s['exact_threshold']:,} chunks, HNSW m=16, ef_construction=64.",
        f"Hybrid p95 <= {target['hybrid_p95_ms_at_most']} ms: {verdict(target['p95_met'])}; "
        f"hybrid recall@10 >= {target['hybrid_recall_at_10_at_least']}: "
        f"{verdict(target['recall_met'])} (recall against the brute-force hybrid ranking).",
        "Sizes (MiB): " + ", ".join(f"{name} {_mib(size)}" for name, size in sorted(sizes.items())),
        f"Server memory: {memory.get('pss_mib')} MiB PSS ({memory.get('rss_mib')} MiB RSS "
        f"summed) over {memory.get('processes')} processes, shared_buffers "
        f"{memory.get('shared_buffers')}.",
        "Build (s): " + ", ".join(f"{name} {value}" for name, value in timings.items()),
        "First search of an organization (reads its vectors into the process's cache) and "
        "what the cache then holds: "
        + "; ".join(
            f"{space} {label}: {o.get('first_search_ms')} ms, {o.get('cache_mib')} MiB"
            for space in ("hashing", "clustered")
            if result.get(space)
            for label, o in result[space]["organizations"].items()
        ),
    ]
    return "### Search\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
