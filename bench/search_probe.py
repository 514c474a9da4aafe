"""Measuring retrieval (:mod:`bench.search`): latencies, recall@10 against exact rankings,
and what the server holds in memory.

**Recall@10 of the hybrid search.** The reference is the same score computed by brute
force: the exact vector ranking (every visible chunk's cosine distance to the query
vector, ordered by ``(distance, id)``, top 40) and the full-text ranking (every matching
chunk by ``ts_rank_cd``, then id, top 40), fused by reciprocal rank (``1 / (60 + rank)``
summed, ties to the better single rank then the smaller id) exactly as
:func:`services.ingestion.search.search` fuses, top 10. Recall@10 is the share of that top
10 the search returned; a returned chunk whose exact fused score equals the tenth's counts
(ties are ordered arbitrarily). 40 is the depth ``search`` ranks each list to for
``top_k`` 10.

**Recall@10 of a vector ranking** is against the exact top 10 by distance, a chunk tied
with the tenth distance counting (:func:`testkit.search_corpus.recall`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from bench.common import percentile, rnd
from services.indexing.embedders import Embedder
from services.ingestion import vector_cache
from services.ingestion.search import (
    DEFAULT_EXACT_THRESHOLD,
    fuse,
    search,
    vector_search,
)
from services.ingestion.search_scope import SearchScope
from testkit.search_corpus import exact_neighbours, naive_nearest, recall

TOP_K = 10
DEPTH = max(4 * TOP_K, 40)  # what search() ranks each list to for TOP_K


@dataclass(frozen=True)
class Query:
    """One probe: the text (None: a vector-only probe) and its vector."""

    text: str | None
    vector: list[float]


class FixedEmbedder:
    """Hands ``search()`` the probe's own vector for its text (clustered vectors are not
    any embedder's output)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    @property
    def name(self) -> str:
        return "fixed"

    @property
    def dimensions(self) -> int:
        return len(next(iter(self.vectors.values())))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


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
            f"p{q}_ms": rnd(percentile(self.latencies, q), 2) for q in (50, 95, 99)
        }
        if self.recalls:
            out["recall_at_10"] = rnd(sum(self.recalls) / len(self.recalls), 3)
            out["min_recall_at_10"] = rnd(min(self.recalls), 2)
        return out


def exact_hybrid(
    session: Session, organization_id: int, query: str, vector: Sequence[float]
) -> tuple[list[int], dict[int, float]]:
    """The brute-force hybrid top 10 and every fused score (see the module's docstring)."""
    by_vector = exact_neighbours(session, organization_id, vector, DEPTH)
    by_text = session.scalars(
        text(
            "SELECT c.id FROM api2.kb_chunks c JOIN api2.kb_documents d "
            "ON d.organization_id = c.organization_id AND d.id = c.document_id "
            "CROSS JOIN websearch_to_tsquery('simple', :query) q "
            "WHERE d.deleted_at IS NULL AND c.organization_id = :org AND c.audience = '{}' "
            "AND c.content_tsv @@ q ORDER BY ts_rank_cd(c.content_tsv, q) DESC, c.id LIMIT :depth"
        ),
        {"query": query, "org": organization_id, "depth": DEPTH},
    ).all()
    rankings = [
        {chunk_id: rank for rank, (chunk_id, _) in enumerate(by_vector, start=1)},
        {int(chunk_id): rank for rank, chunk_id in enumerate(by_text, start=1)},
    ]
    fused = fuse(rankings)
    return [chunk_id for chunk_id, _ in fused[:TOP_K]], dict(fused)


def hybrid_recall(found: Sequence[int], truth: Sequence[int], scores: dict[int, float]) -> float:
    if not truth:
        return 1.0
    last = scores[truth[-1]]
    wanted = set(truth)
    hits = sum(1 for i in found[: len(truth)] if i in wanted or scores.get(i, 0.0) >= last)
    return min(hits, len(truth)) / len(truth)


def probe(
    session: Session, organization_id: int, queries: Sequence[Query], embedder: Embedder
) -> dict[str, Any]:
    """Each way of searching over ``queries``: ``hybrid`` (``search()``, for queries with a
    text), the planned vector ranking, the ranking forced onto HNSW, and the naive plan."""
    scope = SearchScope(organization_id)
    ways = {name: Measure() for name in ("hybrid", "vector", "hnsw_iterative", "naive")}
    paths: dict[str, str] = {}
    for query in queries:
        if query.text is not None:
            hits = ways["hybrid"].timed(
                partial(
                    search,
                    session,
                    organization_id=organization_id,
                    knowledge_base_id=None,
                    query=query.text,
                    embedder=embedder,
                )
            )
            truth, scores = exact_hybrid(session, organization_id, query.text, query.vector)
            found = [hit.chunk_id for hit in hits]
            ways["hybrid"].recalls.append(hybrid_recall(found, truth, scores))
        exact = exact_neighbours(session, organization_id, query.vector, TOP_K)
        for name, threshold in (("vector", DEFAULT_EXACT_THRESHOLD), ("hnsw_iterative", 0)):
            ranking = ways[name].timed(
                partial(
                    vector_search,
                    session,
                    scope=scope,
                    vector=query.vector,
                    limit=TOP_K,
                    exact_threshold=threshold,
                )
            )
            paths[name] = str(ranking.path)
            ways[name].recalls.append(recall(ranking.chunks, exact))
        naive = ways["naive"].timed(
            partial(naive_nearest, session, organization_id, query.vector, TOP_K)
        )
        ways["naive"].recalls.append(recall(naive, exact))
    measured = {name: way.summary() for name, way in ways.items() if way.latencies}
    return {"paths": paths, **measured}


def probe_organizations(
    session: Session,
    probes: dict[str, tuple[int, int]],
    make_queries: Callable[[int], list[Query]],
    embedder: Callable[[list[Query]], Embedder],
) -> dict[str, Any]:
    """:func:`probe` per ``label -> (organization_id, rows)``, after 10 warm-up queries,
    with the 1-minute load average before and after. The first of them runs with the
    process's vector cache emptied: ``first_search_ms`` is a search that reads the
    tenant's vectors (:mod:`services.ingestion.vector_cache`), ``cache_mib`` what they
    hold."""
    organizations: dict[str, Any] = {}
    for label, (organization_id, rows) in probes.items():
        queries = make_queries(organization_id)
        chosen = embedder(queries)
        vector_cache.forget_caches()
        first = next(q for q in queries if q.text is not None)
        started = time.perf_counter()
        search(
            session,
            organization_id=organization_id,
            knowledge_base_id=None,
            query=first.text or "",
            embedder=chosen,
        )
        first_search_ms = (time.perf_counter() - started) * 1000
        cache = vector_cache.cache_for(session)
        probe(session, organization_id, queries[:10], chosen)  # warm the caches
        before = os.getloadavg()[0]
        measured = probe(session, organization_id, queries, chosen)
        organizations[label] = {
            "organization_id": organization_id,
            "rows": rows,
            "load_average": [rnd(before, 1), rnd(os.getloadavg()[0], 1)],
            "first_search_ms": rnd(first_search_ms, 2),
            "cache_mib": rnd((cache.nbytes if cache else 0) / 2**20, 1),
            **measured,
        }
        session.rollback()
    return organizations


# -- the server's memory ----------------------------------------------------------------------


def relation_sizes(session: Session) -> dict[str, int]:
    """Bytes of ``kb_chunks`` (heap, TOAST) and of each of its indexes."""
    rows = session.execute(
        text(
            "SELECT 'heap', pg_relation_size('api2.kb_chunks') UNION ALL "
            "SELECT 'toast', coalesce(pg_total_relation_size(reltoastrelid), 0) FROM pg_class "
            "WHERE oid = 'api2.kb_chunks'::regclass UNION ALL "
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            "WHERE indrelid = 'api2.kb_chunks'::regclass"
        )
    ).all()
    return {str(name).removeprefix("api2."): int(size) for name, size in rows}


def server_memory(session: Session) -> dict[str, Any]:
    """The server's processes (postmaster and its children): summed RSS (shared buffers
    counted in every process that touched them) and PSS (shared pages split between the
    processes sharing them: the better total), and ``shared_buffers``."""
    backend = int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
    postmaster = _parent(backend)
    pids = [postmaster, *(pid for pid in _pids() if _parent(pid) == postmaster)]
    rss = sum(_kib(f"/proc/{pid}/status", "VmRSS:") for pid in pids)
    pss = sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
    shared_buffers = session.execute(text("SHOW shared_buffers")).scalar_one()
    return {
        "processes": len(pids),
        "rss_mib": rnd(rss / 1024, 1),
        "pss_mib": rnd(pss / 1024, 1),
        "shared_buffers": shared_buffers,
    }


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def _kib(path: str, field_name: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
