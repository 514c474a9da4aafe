"""Hybrid retrieval (``search_knowledge``): vector and full-text rankings fused by reciprocal
rank. One unit at ~400 lines on purpose: the two rankings, the planner between exact and
index paths and the fusion share one visibility rule, and reading them apart hides it.

A query is embedded with the embedder that indexed the chunks and ranked twice over the
chunks the caller may see: by cosine distance (:func:`vector_search`) and by PostgreSQL full
text (:func:`text_search`, ``websearch_to_tsquery`` in the ``simple`` configuration that
``kb_chunks.content_tsv`` is generated with, ranked by ``ts_rank_cd``). The two top-N lists
are fused with reciprocal rank fusion (``sum 1 / (60 + rank)``), which needs no calibration
between a distance and a text rank.

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
vector ranking counts the organization's (or base's) chunks, stopping at
``exact_threshold`` (an index-only count, cheap for the tenants it sends to the exact path):

* up to the threshold (default 50,000), the **exact** path scores every one of those rows
  (a ``MATERIALIZED`` CTE, so the planner cannot hand the ``ORDER BY`` to the HNSW index)
  through the ``(organization_id, knowledge_base_id)`` index; the vectors are stored in the
  row (``SET STORAGE PLAIN``), so this is one heap visit per chunk. Recall is 1 by
  construction; the cost is linear, about 1.3 us per chunk on these machines (p50 2.6 ms
  for 1,000 chunks, 13.5 ms for 10,000), so ~70 ms at the threshold;
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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.indexing.embedders import Embedder
from shared.db.vector import embedding_storage, vector_literal

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
TEXT_SEARCH_CONFIG = "simple"
SNIPPET_CHARS = 240
_HEADLINE_OPTIONS = (
    'MaxWords=40, MinWords=15, ShortWord=2, MaxFragments=2, FragmentDelimiter=" … ", '
    'StartSel="**", StopSel="**"'
)
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
    by_vector = vector_search(
        session, scope=scope, vector=vector, limit=depth, exact_threshold=exact_threshold
    )
    by_text = text_search(session, scope=scope, query=query, limit=depth)
    vector_ranks = _ranks(chunk_id for chunk_id, _ in by_vector.chunks)
    text_ranks = _ranks(by_text)
    fused = fuse([vector_ranks, text_ranks])[:top_k]
    rows = _details(session, scope, [chunk_id for chunk_id, _ in fused], query, set(text_ranks))
    return [
        SearchHit(
            chunk_id=chunk_id,
            score=score,
            vector_rank=vector_ranks.get(chunk_id),
            text_rank=text_ranks.get(chunk_id),
            **rows[chunk_id],
        )
        for chunk_id, score in fused
        if chunk_id in rows  # deleted since it was ranked
    ]


def fuse(rankings: Sequence[dict[int, int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ``{chunk_id: 1-based rank}`` rankings: ``(chunk_id,
    score)``, best first; ties go to the better single rank, then the smaller id."""
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking in rankings:
        for chunk_id, rank in ranking.items():
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
            best[chunk_id] = min(best.get(chunk_id, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]], item[0]))


def _ranks(chunk_ids: Iterable[int]) -> dict[int, int]:
    return {chunk_id: rank for rank, chunk_id in enumerate(chunk_ids, start=1)}


# -- the visible chunks -----------------------------------------------------------------------


@dataclass(frozen=True)
class SearchScope:
    """The chunks a caller may see: one organization's (always), one base's when
    ``knowledge_base_id`` is set, of live (not deleted) documents, public or sharing a label
    with ``audience``."""

    organization_id: int
    knowledge_base_id: int | None = None
    audience: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.organization_id, bool) or not isinstance(self.organization_id, int):
            raise TypeError(f"organization_id must be an int, got {self.organization_id!r}")
        if isinstance(self.audience, str):
            raise TypeError("audience must be a sequence of labels, not a string")

    def where(self) -> str:
        """The visibility criteria on ``api2.kb_chunks c``."""
        criteria = ["c.organization_id = :organization_id"]
        if self.knowledge_base_id is not None:
            criteria.append("c.knowledge_base_id = :knowledge_base_id")
        criteria += [
            "(c.audience = '{}'::text[] OR c.audience && CAST(:audience AS text[]))",
            "EXISTS (SELECT 1 FROM api2.kb_documents d WHERE d.organization_id = "
            ":organization_id AND d.id = c.document_id AND d.deleted_at IS NULL)",
        ]
        return " AND ".join(criteria)

    def params(self) -> dict[str, Any]:
        return {
            "organization_id": self.organization_id,
            "knowledge_base_id": self.knowledge_base_id,
            "audience": list(self.audience),
        }


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
    storage = embedding_storage(session)
    if not storage.is_pgvector:
        return VectorRanking(
            VectorPath.FLOAT_ARRAY, _float_array_nearest(session, scope, vector, limit)
        )
    if storage.dims is not None and len(vector) != storage.dims:
        raise ValueError(f"the query vector has {len(vector)} dimensions, the index {storage.dims}")
    if not any(vector):
        return VectorRanking(VectorPath.EXACT, [])
    params: dict[str, Any] = {**scope.params(), "vector": vector_literal(vector), "limit": limit}
    if _scope_size(session, scope, exact_threshold + 1) <= exact_threshold:
        statement = (
            "WITH scored AS MATERIALIZED (SELECT c.id, c.embedding <=> CAST(:vector AS vector) "
            f"AS distance FROM api2.kb_chunks c WHERE {scope.where()}) "
            "SELECT id, distance FROM scored WHERE distance <> 'NaN' "
            "ORDER BY distance, id LIMIT :limit"
        )
        return VectorRanking(VectorPath.EXACT, _pairs(session.execute(text(statement), params)))
    # The index walk hands rows over in (roughly) distance order and the filters run on
    # them; LIMIT stops it. Sorting is disabled so the planner cannot prefer sorting the
    # organization's rows (that is the exact path, decided above), and the candidates,
    # which relaxed order may return slightly out of order, are re-sorted here.
    statement = (
        "SELECT c.id, c.embedding <=> CAST(:vector AS vector) FROM api2.kb_chunks c "
        f"WHERE {scope.where()} ORDER BY c.embedding <=> CAST(:vector AS vector) LIMIT :limit"
    )
    candidates = min(max(HNSW_OVERSAMPLING * limit, 40), 1_000)
    params["limit"] = candidates
    settings = {
        "hnsw.ef_search": str(max(HNSW_EF_SEARCH, candidates)),
        "enable_sort": "off",
    }
    if _has_iterative_scan(session):
        settings["hnsw.iterative_scan"] = "relaxed_order"
    with _local_settings(session, settings):
        found = _pairs(session.execute(text(statement), params))
    rows = sorted(((i, d) for i, d in found if not math.isnan(d)), key=lambda r: (r[1], r[0]))
    return VectorRanking(VectorPath.HNSW, rows[:limit])


def _scope_size(session: Session, scope: SearchScope, cap: int) -> int:
    """How many chunks the scope's organization (and base) holds, counting at most ``cap``:
    an index-only count that stays cheap for the small tenants the exact path serves."""
    where = "c.organization_id = :organization_id"
    if scope.knowledge_base_id is not None:
        where += " AND c.knowledge_base_id = :knowledge_base_id"
    statement = f"SELECT count(*) FROM (SELECT 1 FROM api2.kb_chunks c WHERE {where} LIMIT :cap) s"
    return int(session.execute(text(statement), {**scope.params(), "cap": cap}).scalar_one())


def _float_array_nearest(
    session: Session, scope: SearchScope, vector: Sequence[float], limit: int
) -> list[tuple[int, float]]:
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        return []
    # Rows of another length come from another embedder's space: not comparable, skipped.
    statement = (
        "WITH scored AS MATERIALIZED (SELECT c.id, (SELECT 1 - sum(a * b) / "
        "NULLIF(sqrt(sum(a * a)) * :norm, 0) FROM unnest(c.embedding, "
        "CAST(:vector AS float8[])) AS t(a, b)) AS distance FROM api2.kb_chunks c "
        f"WHERE {scope.where()} AND cardinality(c.embedding) = :dims) "
        "SELECT id, distance FROM scored WHERE distance IS NOT NULL "
        "ORDER BY distance, id LIMIT :limit"
    )
    params = {
        **scope.params(),
        "vector": [float(value) for value in vector],
        "norm": norm,
        "dims": len(vector),
        "limit": limit,
    }
    return _pairs(session.execute(text(statement), params))


def _pairs(result: Any) -> list[tuple[int, float]]:
    return [(int(chunk_id), float(distance)) for chunk_id, distance in result]


def _has_iterative_scan(session: Session) -> bool:
    version = session.execute(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    ).scalar_one_or_none()
    if version is None:
        return False
    major, minor = (int(part) for part in str(version).split(".")[:2])
    return (major, minor) >= (0, 8)


@contextmanager
def _local_settings(session: Session, settings: dict[str, str]) -> Iterator[None]:
    """Run the block with ``settings`` in a savepoint that is rolled back afterwards, which
    undoes them: the caller's transaction keeps its own settings. The block only reads."""
    savepoint = session.begin_nested()
    try:
        assignments = ", ".join(
            f"set_config(:name{i}, :value{i}, true)" for i in range(len(settings))
        )
        params: dict[str, str] = {}
        for i, (name, value) in enumerate(settings.items()):
            params |= {f"name{i}": name, f"value{i}": value}
        session.execute(text(f"SELECT {assignments}"), params)
        yield
    finally:
        savepoint.rollback()


# -- the text ranking -------------------------------------------------------------------------


def text_search(session: Session, *, scope: SearchScope, query: str, limit: int) -> list[int]:
    """The ``limit`` visible chunks that match ``query`` (web-search syntax: quoted phrases,
    ``or``, ``-word``), by ``ts_rank_cd`` (proximity counts), best first."""
    if not _WORD.search(query):
        return []
    statement = (
        f"SELECT c.id FROM api2.kb_chunks c, websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', "
        f":query) q WHERE {scope.where()} AND c.content_tsv @@ q "
        "ORDER BY ts_rank_cd(c.content_tsv, q) DESC, c.id LIMIT :limit"
    )
    result = session.execute(text(statement), {**scope.params(), "query": query, "limit": limit})
    return [int(chunk_id) for chunk_id in result.scalars()]


# -- the answer's rows ------------------------------------------------------------------------


def _details(
    session: Session, scope: SearchScope, chunk_ids: list[int], query: str, matched: set[int]
) -> dict[int, dict[str, Any]]:
    """``chunk_id -> SearchHit fields`` (document, base, position, snippet, content, the
    document's name and version) of the chunks still visible."""
    if not chunk_ids:
        return {}
    statement = (
        "SELECT c.id, c.document_id, c.knowledge_base_id, c.position, CASE WHEN c.id = "
        f"ANY(CAST(:matched AS bigint[])) THEN ts_headline('{TEXT_SEARCH_CONFIG}', c.content, "
        f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', :query), :options) END, "
        "c.content, doc.name, doc.current_version FROM api2.kb_chunks c "
        "JOIN api2.kb_documents doc ON doc.organization_id = c.organization_id "
        "AND doc.id = c.document_id "
        f"WHERE c.id = ANY(CAST(:ids AS bigint[])) AND {scope.where()}"
    )
    params = {
        **scope.params(),
        "ids": chunk_ids,
        "matched": sorted(matched.intersection(chunk_ids)),
        "query": query,
        "options": _HEADLINE_OPTIONS,
    }
    return {
        int(row[0]): {
            "document_id": int(row[1]),
            "knowledge_base_id": int(row[2]),
            "position": int(row[3]),
            "snippet": row[4] or _lead(row[5]),
            "content": str(row[5]),
            "document_name": str(row[6]),
            "document_version": int(row[7]),
        }
        for row in session.execute(text(statement), params)
    }


def _lead(content: str) -> str:
    """The first ~240 characters, cut at a word boundary."""
    if len(content) <= SNIPPET_CHARS:
        return content.strip()
    cut = content[:SNIPPET_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > SNIPPET_CHARS // 2 else cut).rstrip() + " …"
