"""Hybrid retrieval (``search_knowledge``): vector and full-text rankings fused by reciprocal
rank.

A query is embedded with the embedder that indexed the chunks and ranked twice over the
chunks the caller may see: by cosine distance (:func:`vector_search`) and by PostgreSQL full
text (:func:`text_search`, ``websearch_to_tsquery`` in the ``simple`` configuration that
``kb_chunks.content_tsv`` is generated with, ranked by ``ts_rank_cd``). The two top-N lists
are fused with reciprocal rank fusion (``sum 1 / (60 + rank)``), which needs no calibration
between a distance and a text rank. :func:`search` does all of it (both rankings, the
fusion, the hits' text and documents) in one statement, one round trip
(:mod:`services.ingestion.search_sql`); on the HNSW path the vector ranking is a statement
of its own (it needs its settings), and the rest is still one.

Visibility is decided in SQL, in every statement: the caller's organization (always), the
knowledge base when given, documents not deleted, and the audience: a chunk with an empty
audience is public, any other is visible when it shares a label with the caller's audience
(none passed: public chunks only). A document's chunks are its current version's, whatever
its status: a new document has none until it is ready, and a re-uploaded one keeps its
current version searchable (under the new audience) until the new chunk set replaces it in
one transaction, or, when the new content fails, stays on that last good version.

Vector planner. pgvector's HNSW index knows nothing of tenants: ``ORDER BY distance LIMIT n``
filtered to one organization walks the graph and filters afterwards, which measured 0.055
recall@10 for an organization with 1% of 100,000 chunks (``bench/search.py``). So the
vector ranking looks at the organization's (or base's) size, counted up to
``exact_threshold`` and remembered for a few seconds (:mod:`services.ingestion.search_planner`):

* up to the threshold (default 50,000), the **exact** path scores every one of those rows.
  Where migration ``api2_0006`` ran it reads the tenant's half-precision vectors from a
  covering index (index-only, ~830 bytes a chunk) and re-ranks a shortlist by the exact
  distance, so recall is 1 by construction (see :mod:`services.ingestion.search_sql`);
  the cost is linear in the tenant's chunks, and it is what the scan reads. Where
  migration ``api2_0007`` ran, the process ranks from its own copy of the tenant's
  vectors instead (:mod:`services.ingestion.vector_ranking`; the same exact ranking), and SQL
  filters and fetches the answer;
* above it, the **HNSW** path uses pgvector 0.8's iterative index scan
  (``hnsw.iterative_scan = relaxed_order``, ``hnsw.ef_search`` 200), which keeps walking
  the graph until enough rows pass the filters; it takes four times the candidates asked
  for and re-sorts them by exact distance. The settings live in a savepoint rolled back
  after the query (before pgvector 0.8 only ``ef_search`` is raised). Its recall is the
  index's: 0.97-0.98 on clustered (semantic-like) vectors, but 0.74-0.77 with the hashing
  embedder, whose lexical space HNSW navigates poorly even unfiltered; this is why the
  threshold is high.

Without pgvector (``float8[]`` embeddings) the distance is computed exactly in SQL (an
``unnest`` of both arrays per row) over the visible rows, with no index to help: about
75 us per 384-dimension chunk (p50 73 ms for 1,000 chunks, 0.8 s for 10,000). It is the
zero-install fallback, not a production configuration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.indexing.embedders import Embedder
from services.ingestion import search_sql, vector_ranking
from services.ingestion.search_planner import (
    execute_with_settings,
    layout,
    local_settings,
    scope_size,
)
from services.ingestion.search_scope import SearchScope
from shared.db.vector import EmbeddingStorage, embedding_storage, vector_literal

#: Above this many chunks in the searched scope, the vector ranking uses the HNSW index.
DEFAULT_EXACT_THRESHOLD = 50_000
#: Reciprocal rank fusion's constant (Cormack et al. 2009).
RRF_K = 60
#: ``hnsw.ef_search`` on the HNSW path (pgvector's default is 40; its maximum 1,000).
HNSW_EF_SEARCH = 200
#: The HNSW path takes this many times ``limit`` candidates (at least 40), re-sorts them by
#: exact distance and keeps ``limit``: relaxed order returns the walk's rows only roughly
#: sorted, so the best ``limit`` may come a little later.
HNSW_OVERSAMPLING = 4
MAX_TOP_K = 200
#: The full-text configuration of ``kb_chunks.content_tsv`` (see the migration).
TEXT_SEARCH_CONFIG = search_sql.TEXT_SEARCH_CONFIG
SNIPPET_CHARS = 240
_WORD = re.compile(r"\w", re.UNICODE)


class VectorPath(StrEnum):
    """How a vector ranking was computed."""

    EXACT = "exact"
    HNSW = "hnsw"
    FLOAT_ARRAY = "float8[]"


@dataclass(frozen=True)
class SearchHit:
    """One chunk of a search's answer.

    Attributes:
      score: its reciprocal-rank-fusion score (higher is better).
      snippet: the best-matching fragments (matches in ``**``) or, without a text match,
        the chunk's first ~240 characters.
      content: the chunk's whole text, for an answer to ground on (``search_knowledge``).
      document_name / document_version: the document the chunk belongs to, and its version
        the chunk was indexed from (the document's current version).
      vector_rank / text_rank: its 1-based rank in each ranking, None when not in it.
    """

    chunk_id: int
    document_id: int
    knowledge_base_id: int
    position: int
    score: float
    snippet: str
    vector_rank: int | None
    text_rank: int | None
    content: str = ""
    document_name: str = ""
    document_version: int = 0


@dataclass(frozen=True)
class VectorRanking:
    """The nearest visible chunks, nearest first, as ``(chunk_id, cosine distance)``."""

    path: VectorPath
    chunks: list[tuple[int, float]]


def search(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int | None,
    query: str,
    top_k: int = 10,
    audience: Sequence[str] = (),
    embedder: Embedder,
    exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
) -> list[SearchHit]:
    """The ``top_k`` chunks best matching ``query`` that the caller may see, best first.

    Parameters:
      knowledge_base_id: search this base only; None searches every base of the organization.
      audience: the caller's audience labels; chunks with an audience need one of them.
      embedder: the embedder the chunks were indexed with.
      exact_threshold: see the module's planner notes.

    Raises:
      ValueError: ``top_k`` out of 1..200, or an embedder of another dimension than the
        stored vectors.
      TypeError: ``audience`` given as a string, or an organization id that is not an int.
    """
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    if isinstance(audience, str):
        raise TypeError("audience must be a sequence of labels, not a string")
    if not _WORD.search(query):
        return []
    scope = SearchScope(organization_id, knowledge_base_id, tuple(audience))
    depth = min(max(4 * top_k, 40), 1_000)
    vector = embedder.embed([query])[0]
    params: dict[str, Any] = {
        **scope.params(),
        "query": query,
        "depth": depth,
        "top_k": top_k,
        "rrf_k": RRF_K,
        "options": search_sql.HEADLINE_OPTIONS,
    }
    storage = _checked_storage(session, vector)
    where = scope.where()
    if not storage.is_pgvector or not any(vector):
        # float8[] (or no query vector): the vector ranking first, then the rest in one.
        ranking = vector_search(
            session, scope=scope, vector=vector, limit=depth, exact_threshold=exact_threshold
        )
        params["vector_ids"] = [chunk_id for chunk_id, _ in ranking.chunks]
        statement = search_sql.hybrid(where, search_sql.ranked_given())
        rows: Iterable[Any] = session.execute(text(statement), params)
    elif _exact_path(session, scope, exact_threshold):
        cached = _cached_nearest(session, scope, where, vector, depth, storage)
        if cached is not None:
            # Ranked from the process's copy of the tenant's vectors; the rest in one.
            params["vector_ids"] = [chunk_id for chunk_id, _ in cached]
            statement = search_sql.hybrid(where, search_sql.ranked_given())
        else:
            # The whole search in one statement: both rankings, the fusion, the hits' rows.
            params |= _exact_params(vector, depth)
            nearest = search_sql.exact_nearest(where, half_scan=layout(session).half_scan)
            statement = search_sql.hybrid(where, search_sql.ranked_in_sql(nearest))
        rows = session.execute(text(statement), params)
    else:
        # The same statement with the index walk as its vector ranking, under the index
        # path's settings: savepoint, settings, statement and rollback in one round trip.
        params |= _index_params(vector, depth)
        ranked = search_sql.ranked_in_sql(search_sql.index_nearest_sorted(where))
        statement = search_sql.hybrid(where, ranked)
        settings = _index_settings(session, params["candidates"])
        rows = execute_with_settings(session, settings, statement, params)
    return [_hit(row) for row in rows]


def _hit(row: Any) -> SearchHit:
    return SearchHit(
        chunk_id=int(row[0]),
        score=float(row[1]),
        vector_rank=None if row[2] is None else int(row[2]),
        text_rank=None if row[3] is None else int(row[3]),
        document_id=int(row[4]),
        knowledge_base_id=int(row[5]),
        position=int(row[6]),
        snippet=row[7] or _lead(row[8]),
        content=str(row[8]),
        document_name=str(row[9]),
        document_version=int(row[10]),
    )


def fuse(rankings: Sequence[dict[int, int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ``{chunk_id: 1-based rank}`` rankings: ``(chunk_id,
    score)``, best first; ties go to the better single rank, then the smaller id. (The
    same fusion as :func:`search`'s statement, for callers holding rankings.)"""
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking in rankings:
        for chunk_id, rank in ranking.items():
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
            best[chunk_id] = min(best.get(chunk_id, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]], item[0]))


# -- the vector ranking -----------------------------------------------------------------------


def vector_search(
    session: Session,
    *,
    scope: SearchScope,
    vector: Sequence[float],
    limit: int,
    exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
) -> VectorRanking:
    """The ``limit`` visible chunks nearest to ``vector`` by cosine distance (chunks or a
    query with a zero vector have no distance and are left out)."""
    storage = _checked_storage(session, vector)
    if not storage.is_pgvector:
        return VectorRanking(
            VectorPath.FLOAT_ARRAY, _float_array_nearest(session, scope, vector, limit)
        )
    if not any(vector):
        return VectorRanking(VectorPath.EXACT, [])
    params: dict[str, Any] = {**scope.params(), "vector": vector_literal(vector), "limit": limit}
    where = scope.where()
    if _exact_path(session, scope, exact_threshold):
        cached = _cached_nearest(session, scope, where, vector, limit, storage)
        if cached is not None:
            return VectorRanking(VectorPath.EXACT, cached)
        params |= _exact_params(vector, limit)
        statement = search_sql.exact_nearest(where, half_scan=layout(session).half_scan)
        return VectorRanking(VectorPath.EXACT, _pairs(session.execute(text(statement), params)))
    # The index walk hands rows over in (roughly) distance order and the filters run on
    # them; LIMIT stops it. The candidates, which relaxed order may return slightly out of
    # order, are re-sorted here.
    params |= _index_params(vector, limit)
    with local_settings(session, _index_settings(session, params["candidates"])):
        statement = search_sql.index_nearest(where, "candidates")
        found = _pairs(session.execute(text(statement), params))
    rows = sorted(((i, d) for i, d in found if not math.isnan(d)), key=lambda r: (r[1], r[0]))
    return VectorRanking(VectorPath.HNSW, rows[:limit])


def _index_params(vector: Sequence[float], limit: int) -> dict[str, Any]:
    candidates = min(max(HNSW_OVERSAMPLING * limit, 40), 1_000)
    return {"vector": vector_literal(vector), "limit": limit, "candidates": candidates}


def _index_settings(session: Session, candidates: int) -> dict[str, str]:
    """The HNSW path's settings. Sorting is disabled so the planner cannot prefer sorting
    the organization's rows (that is the exact path, chosen by size); the plan is made for
    this organization (never a prepared statement's generic plan), so a partial HNSW index
    of its own (``WHERE organization_id = <id>``, :mod:`services.ingestion.tenant_index`)
    is used where it exists: a walk over the tenant's graph alone."""
    settings = {
        "hnsw.ef_search": str(max(HNSW_EF_SEARCH, candidates)),
        "enable_sort": "off",
        "plan_cache_mode": "force_custom_plan",
    }
    if layout(session).iterative_scan:
        settings["hnsw.iterative_scan"] = "relaxed_order"
    return settings


def _checked_storage(session: Session, vector: Sequence[float]) -> EmbeddingStorage:
    storage = embedding_storage(session)
    if storage.is_pgvector and storage.dims is not None and len(vector) != storage.dims:
        raise ValueError(f"the query vector has {len(vector)} dimensions, the index {storage.dims}")
    return storage


def _exact_path(session: Session, scope: SearchScope, exact_threshold: int) -> bool:
    size = scope_size(session, scope.organization_id, scope.knowledge_base_id, exact_threshold + 1)
    return size <= exact_threshold


def _cached_nearest(
    session: Session,
    scope: SearchScope,
    where: str,
    vector: Sequence[float],
    limit: int,
    storage: EmbeddingStorage,
) -> list[tuple[int, float]] | None:
    """The exact ranking from the process's vector cache, or None (see
    :mod:`services.ingestion.vector_ranking`); ``where`` is ``scope.where()``."""
    if storage.dims is None:
        return None
    return vector_ranking.nearest_visible(
        session,
        organization_id=scope.organization_id,
        knowledge_base_id=scope.knowledge_base_id,
        where=where,
        params=scope.params(),
        vector=vector,
        limit=limit,
        dims=storage.dims,
    )


def _exact_params(vector: Sequence[float], limit: int) -> dict[str, Any]:
    literal = vector_literal(vector)
    # Two parameters, one text: a parameter has one type, and the second use of one would
    # cast it per row where the plan is generic (prepared statements).
    return {
        "vector": literal,
        "vector_half": literal,
        "limit": limit,
        "shortlist": search_sql.SHORTLIST_FACTOR * limit,
    }


def _float_array_nearest(
    session: Session, scope: SearchScope, vector: Sequence[float], limit: int
) -> list[tuple[int, float]]:
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        return []
    params = {
        **scope.params(),
        "vector": [float(value) for value in vector],
        "norm": norm,
        "dims": len(vector),
        "limit": limit,
    }
    statement = search_sql.float_array_nearest(scope.where())
    return _pairs(session.execute(text(statement), params))


def _pairs(result: Any) -> list[tuple[int, float]]:
    return [(int(chunk_id), float(distance)) for chunk_id, distance in result]


# -- the text ranking -------------------------------------------------------------------------


def text_search(session: Session, *, scope: SearchScope, query: str, limit: int) -> list[int]:
    """The ``limit`` visible chunks that match ``query`` (web-search syntax: quoted phrases,
    ``or``, ``-word``), by ``ts_rank_cd`` (proximity counts), best first."""
    if not _WORD.search(query):
        return []
    statement = f"SELECT id FROM ({search_sql.text_ranked(scope.where())}) t ORDER BY rank"
    params = {**scope.params(), "query": query, "depth": limit}
    return [int(chunk_id) for chunk_id in session.execute(text(statement), params).scalars()]


def _lead(content: str) -> str:
    """The first ~240 characters, cut at a word boundary."""
    if len(content) <= SNIPPET_CHARS:
        return content.strip()
    cut = content[:SNIPPET_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > SNIPPET_CHARS // 2 else cut).rstrip() + " …"
