"""Tenant-filtered retrieval at 100,000 chunks: latency and recall@10 of
:mod:`services.ingestion.search` on the embedded PostgreSQL 18 with pgvector 0.8.

What runs: a fresh embedded PostgreSQL in a temporary directory, migrated; a synthetic
corpus of ``chunks`` chunks (short texts drawn from per-organization topics over a Zipfian
vocabulary, embedded with the hashing embedder, 384 dimensions) across organizations where
one holds ~1% and one ~10% of the rows; the HNSW index is built after the load, then
``VACUUM ANALYZE``. Per probed organization, ``queries`` queries (5 to 9 consecutive words
of one of its chunks) are run through:

* ``search()``: the hybrid search as the API calls it (vector + full text, fused, snippets);
* the vector ranking alone, as planned (``exact`` below the threshold);
* the vector ranking forced onto the HNSW path (threshold 0: iterative scan, relaxed
  order, ``ef_search`` 200, exact re-sort);
* the naive plan: ``WHERE organization_id = :org ORDER BY embedding <=> :q LIMIT 10`` with
  pgvector's defaults, which walks the index and filters afterwards.

Recall@10 is against the exact top 10 (every distance of the organization's rows computed,
no index); a returned chunk tied with the 10th exact distance counts as found.

  python -m bench.search              # 100,000 chunks, 200 queries per organization
  python -m bench.search --quick      # 20,000 chunks, 50 queries

The corpus (:mod:`testkit.search_corpus`) is the one the search tests load too.
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from bench.common import markdown_table, percentile, rnd, verdict, write_result
from services.indexing.embedders import HashingEmbedder
from services.ingestion.search import (
    DEFAULT_EXACT_THRESHOLD,
    SearchScope,
    search,
    vector_search,
)
from shared.db.vector import parse_vector
from testkit.search_corpus import (
    HNSW_INDEX,
    HNSW_INDEX_SQL,
    TextMaker,
    exact_neighbours,
    load_corpus,
    naive_nearest,
    organization_sizes,
    recall,
)

RECALL_TARGET = 0.95
DEFAULTS: dict[str, Any] = {
    "chunks": 100_000,
    "organizations": 40,
    "queries": 200,
    "seed": 3,
    "clustered": True,
}
QUICK: dict[str, Any] = {
    "chunks": 20_000,
    "organizations": 20,
    "queries": 50,
    "seed": 3,
    "clustered": True,
}


# -- the benchmark ----------------------------------------------------------------------------


@dataclass
class Measure:
    """Latencies (ms) and recalls of one way of searching."""

    latencies: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)

    def timed(self, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = call()
        self.latencies.append((time.perf_counter() - started) * 1000)
        return value

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "p50_ms": rnd(percentile(self.latencies, 50), 2),
            "p95_ms": rnd(percentile(self.latencies, 95), 2),
        }
        if self.recalls:
            out["recall_at_10"] = rnd(sum(self.recalls) / len(self.recalls), 3)
            out["min_recall_at_10"] = rnd(min(self.recalls), 2)
        return out


def _probe(
    session: Session,
    organization_id: int,
    queries: Sequence[tuple[str | None, list[float]]],
) -> dict[str, Any]:
    """Each way of searching over ``(query text or None, query vector)`` pairs; the hybrid
    search runs for queries with a text."""
    scope = SearchScope(organization_id)
    ways = {name: Measure() for name in ("hybrid", "vector", "hnsw_iterative", "naive")}
    paths: dict[str, str] = {}
    embedder = HashingEmbedder()
    for query, vector in queries:
        truth = exact_neighbours(session, organization_id, vector, 10)
        for name, threshold in (("vector", DEFAULT_EXACT_THRESHOLD), ("hnsw_iterative", 0)):
            ranking = ways[name].timed(
                partial(
                    vector_search,
                    session,
                    scope=scope,
                    vector=vector,
                    limit=10,
                    exact_threshold=threshold,
                )
            )
            paths[name] = str(ranking.path)
            ways[name].recalls.append(recall(ranking.chunks, truth))
        found = ways["naive"].timed(partial(naive_nearest, session, organization_id, vector, 10))
        ways["naive"].recalls.append(recall(found, truth))
        if query is not None:
            ways["hybrid"].timed(
                partial(
                    search,
                    session,
                    organization_id=organization_id,
                    knowledge_base_id=None,
                    query=query,
                    embedder=embedder,
                )
            )
    measured = {name: way.summary() for name, way in ways.items() if way.latencies}
    return {"paths": paths, **measured}


def _probe_organizations(
    session: Session,
    probes: dict[str, tuple[int, int]],
    make_queries: Callable[[int], list[tuple[str | None, list[float]]]],
) -> dict[str, Any]:
    organizations: dict[str, Any] = {}
    for label, (organization_id, rows) in probes.items():
        queries = make_queries(organization_id)
        _probe(session, organization_id, queries[:10])  # warm the caches
        organizations[label] = {
            "organization_id": organization_id,
            "rows": rows,
            **_probe(session, organization_id, queries),
        }
        session.rollback()
    return organizations


def _vacuum(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE api2.kb_chunks, api2.kb_documents")
        )


def _build_index(session: Session) -> float:
    started = time.perf_counter()
    session.execute(text("SET maintenance_work_mem = '512MB'"))
    session.execute(text(HNSW_INDEX_SQL))
    session.commit()
    return time.perf_counter() - started


# -- clustered vectors ------------------------------------------------------------------------


def cluster_embeddings(session: Session, topics: int, topics_per_organization: int) -> None:
    """Replace every chunk's embedding with a clustered one: ``topics`` random unit centres
    shared by all organizations, each organization drawing ``topics_per_organization`` of
    them, each chunk its centre plus Gaussian noise of norm ~0.8, normalised. Unlike the
    hashing space (where a query is near-orthogonal to almost everything), this is the
    shape HNSW navigates well, as with a semantic embedding model; several organizations
    share each topic, so filtering after the index still loses most of a top-10."""
    session.execute(text("SELECT setseed(0.3)"))
    session.execute(
        text(
            "CREATE TEMP TABLE bench_topics ON COMMIT DROP AS SELECT t AS id, l2_normalize("
            "array(SELECT random_normal() FROM generate_series(1, 384) WHERE t > 0)"
            "::vector(384)) AS v FROM generate_series(1, :topics) t"
        ),
        {"topics": topics},
    )
    session.execute(
        text(
            "CREATE TEMP TABLE bench_organization_topics ON COMMIT DROP AS "
            "SELECT o.organization_id, k, (1 + floor(random() * :topics))::int AS topic "
            "FROM (SELECT DISTINCT organization_id FROM api2.kb_chunks) o, "
            "generate_series(0, :per - 1) k"
        ),
        {"topics": topics, "per": topics_per_organization},
    )
    session.execute(
        text(
            "UPDATE api2.kb_chunks c SET embedding = l2_normalize(t.v + array(SELECT "
            "random_normal(0, 0.0408) FROM generate_series(1, 384) WHERE c.id > 0)"
            "::vector(384)) FROM bench_organization_topics ot JOIN bench_topics t "
            "ON t.id = ot.topic WHERE ot.organization_id = c.organization_id "
            "AND ot.k = c.id % :per"
        ),
        {"per": topics_per_organization},
    )


def clustered_queries(
    session: Session, organization_id: int, count: int, rng: random.Random
) -> list[tuple[str | None, list[float]]]:
    """Query vectors near random chunks of the organization (noise of norm ~0.4)."""
    rows = session.execute(
        text(
            "SELECT embedding FROM api2.kb_chunks WHERE organization_id = :org "
            "ORDER BY id LIMIT 5000"
        ),
        {"org": organization_id},
    ).scalars()
    vectors = [parse_vector(row) or [] for row in rows]
    queries: list[tuple[str | None, list[float]]] = []
    for vector in rng.sample(vectors, count):
        noisy = [value + rng.gauss(0, 0.02) for value in vector]
        norm = math.sqrt(sum(value * value for value in noisy))
        queries.append((None, [value / norm for value in noisy]))
    return queries


# -- the run ----------------------------------------------------------------------------------


def run(*, quick: bool = False, **overrides: Any) -> dict[str, Any]:
    """Start a private embedded PostgreSQL, load the corpus, measure; returns the result."""
    from services.app.embedded import start_embedded_postgres
    from shared.db.engine import make_engine
    from shared.db.migrate import upgrade

    settings = dict(QUICK if quick else DEFAULTS)
    settings.update({k: v for k, v in overrides.items() if k in settings and v is not None})
    total = settings["chunks"]
    # label -> (organization_id, rows): organizations 1 and 2 hold 1% and 10% of the rows.
    probes = {"1%": (1, total // 100), "10%": (2, total // 10)}
    sizes = organization_sizes(
        total, settings["organizations"], {0: total // 100, 1: total // 10}, first_id=1
    )
    embedder = HashingEmbedder()
    maker = TextMaker(settings["seed"])
    timings: dict[str, float] = {}
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-search-") as directory:
        service = start_embedded_postgres(Path(directory) / "postgres", port=0, database="bench")
        engine = make_engine(service.url)
        try:
            upgrade(service.url)
            with Session(engine) as session:
                session.execute(text(f"DROP INDEX api2.{HNSW_INDEX}"))
                started = time.perf_counter()
                texts = load_corpus(session, sizes, maker, embedder=embedder)
                session.commit()
                timings["load_s"] = time.perf_counter() - started
                timings["hnsw_build_s"] = _build_index(session)
            _vacuum(engine)

            def hashing_queries(organization_id: int) -> list[tuple[str | None, list[float]]]:
                chosen = [
                    maker.query(maker.rng.choice(texts[organization_id]))
                    for _ in range(settings["queries"])
                ]
                return [(q, v) for q, v in zip(chosen, embedder.embed(chosen), strict=True)]

            with Session(engine) as session:
                result["hashing"] = _probe_organizations(session, probes, hashing_queries)
                result["server"] = {
                    "postgresql": session.execute(text("SHOW server_version")).scalar_one(),
                    "pgvector": session.execute(
                        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
                    ).scalar_one(),
                }
            if settings["clustered"]:
                with Session(engine) as session:
                    started = time.perf_counter()
                    session.execute(text(f"DROP INDEX api2.{HNSW_INDEX}"))
                    cluster_embeddings(session, topics=100, topics_per_organization=40)
                    session.commit()
                    timings["clustered_update_s"] = time.perf_counter() - started
                    timings["clustered_hnsw_build_s"] = _build_index(session)
                _vacuum(engine)
                rng = random.Random(settings["seed"])
                with Session(engine) as session:
                    result["clustered"] = _probe_organizations(
                        session,
                        probes,
                        lambda org: clustered_queries(session, org, settings["queries"], rng),
                    )
        finally:
            engine.dispose()
            service.stop()
    planned = [o["vector"]["recall_at_10"] for o in result["hashing"].values()]
    return {
        "benchmark": "search",
        "quick": quick,
        "settings": {**settings, "exact_threshold": DEFAULT_EXACT_THRESHOLD},
        "server": result["server"],
        "timings": {k: rnd(v, 1) for k, v in timings.items()},
        "organizations": result["hashing"],
        "clustered": result.get("clustered"),
        "targets": {
            "recall_at_10_at_least": RECALL_TARGET,
            "recall_at_10_met": min(planned) >= RECALL_TARGET,
        },
    }


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
                 m["p95_ms"], cell]
            )  # fmt: skip
    return rows


def summary(result: dict[str, Any]) -> str:
    s, target, timings = result["settings"], result["targets"], result["timings"]
    rows = _rows(result["organizations"], "hashing")
    if result.get("clustered"):
        rows += _rows(result["clustered"], "clustered")
    table = markdown_table(
        ["vectors", "organization", "query", "p50 ms", "p95 ms", "recall@10 vs exact"], rows
    )
    notes = [
        f"{s['chunks']:,} chunks over {s['organizations']} organizations, {s['queries']} "
        f"queries per organization; PostgreSQL {result['server']['postgresql']}, pgvector "
        f"{result['server']['pgvector']} (embedded), vectors stored in the row (STORAGE "
        "PLAIN), HNSW m=16, ef_construction=64.",
        f"Planned vector ranking recall@10 >= {target['recall_at_10_at_least']}: "
        f"{verdict(target['recall_at_10_met'])} (the exact path serves organizations up to "
        f"{s['exact_threshold']:,} chunks).",
        "hashing: the hashing embedder's vectors of the chunk texts, queries of 5-9 words of "
        "a chunk. clustered: the same rows re-embedded as noisy copies of topic centres shared "
        "across organizations (an HNSW-friendly space, like a semantic model's).",
        f"Load {timings['load_s']} s (embedding + COPY), HNSW build {timings['hnsw_build_s']} s"
        + (
            f"; clustered re-embedding {timings['clustered_update_s']} s, rebuild "
            f"{timings['clustered_hnsw_build_s']} s."
            if "clustered_update_s" in timings
            else "."
        ),
    ]
    return "### Search\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.search",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunks", type=int)
    parser.add_argument("--queries", type=int)
    parser.add_argument("--no-clustered", action="store_true", help="skip the clustered run")
    options = parser.parse_args(argv)
    result = run(
        quick=options.quick,
        chunks=options.chunks,
        queries=options.queries,
        clustered=False if options.no_clustered else None,
    )
    path = write_result("search", result)
    print(summary(result))
    print(f"(results: {path})")


if __name__ == "__main__":
    main()
