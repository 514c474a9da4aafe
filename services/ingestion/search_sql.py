"""The SQL of retrieval: the vector and text rankings, and the hybrid statement that ranks,
fuses and fetches a search's answer in one round trip.

Every statement takes the visibility criteria of a :class:`SearchScope`-like ``where``
(on ``api2.kb_chunks c``) and its parameters; the caller (:mod:`services.ingestion.search`)
decides the path. Parameters common to all: ``:vector`` (pgvector's text form of the query
vector), ``:query`` (the query text), ``:limit`` / ``:depth`` (how deep each ranking goes).

**The exact scan.** Where migration ``api2_0006`` ran, it reads the covering index
``ix_kb_chunks_scan`` (index-only: the tenant's ids, documents, audiences and
half-precision vectors side by side, ~830 bytes a chunk instead of the ~2 KB row), ranks
by the half-precision distance, keeps a shortlist of ``:shortlist`` chunks and re-ranks
it by the exact ``embedding`` distance (one primary-key visit each). Rounding a unit vector
to 16-bit floats moves a cosine distance by ~1e-4, so a chunk of the exact top ``limit``
falls out of a shortlist of twice ``limit`` only if more than ``limit`` chunks sit within
that margin of it; the answer is then the full-precision ranking. Without the index the
scan reads the rows (``embedding`` is stored in them). Either way a fence (``OFFSET 0``)
keeps the planner from handing the ``ORDER BY`` to the HNSW index.
"""

from __future__ import annotations

#: Re-rank this many times ``limit`` half-precision candidates by the exact distance.
SHORTLIST_FACTOR = 2
TEXT_SEARCH_CONFIG = "simple"
HEADLINE_OPTIONS = (
    'MaxWords=40, MinWords=15, ShortWord=2, MaxFragments=2, FragmentDelimiter=" … ", '
    'StartSel="**", StopSel="**"'
)
_QUERY_VECTOR = "CAST(:vector AS vector)"


def exact_nearest(where: str, *, half_scan: bool) -> str:
    """``(id, distance)`` of the ``:limit`` visible chunks nearest to ``:vector``, nearest
    first, every visible chunk considered (``:shortlist`` too when ``half_scan``)."""
    if not half_scan:
        return (
            f"SELECT id, distance FROM (SELECT c.id, c.embedding <=> {_QUERY_VECTOR} AS "
            f"distance FROM api2.kb_chunks c WHERE {where} OFFSET 0) s "
            "WHERE distance <> 'NaN' ORDER BY distance, id LIMIT :limit"
        )
    shortlist = (
        "SELECT id FROM (SELECT c.id, c.embedding_half <=> CAST(:vector_half AS halfvec) AS "
        f"distance FROM api2.kb_chunks c WHERE {where} OFFSET 0) s "
        "WHERE distance <> 'NaN' ORDER BY distance, id LIMIT :shortlist"
    )
    return (
        f"SELECT id, distance FROM (SELECT r.id, r.embedding <=> {_QUERY_VECTOR} AS distance "
        f"FROM api2.kb_chunks r WHERE r.id IN ({shortlist}) OFFSET 0) s "
        "WHERE distance <> 'NaN' ORDER BY distance, id LIMIT :limit"
    )


def index_nearest(where: str, limit: str = "limit") -> str:
    """``(id, distance)`` of visible chunks in the HNSW index's order (roughly nearest
    first), at most ``:<limit>``; run with the index path's settings."""
    return (
        f"SELECT c.id, c.embedding <=> {_QUERY_VECTOR} AS distance FROM api2.kb_chunks c "
        f"WHERE {where} ORDER BY c.embedding <=> {_QUERY_VECTOR} LIMIT :{limit}"
    )


def index_nearest_sorted(where: str) -> str:
    """:func:`index_nearest` taking ``:candidates`` rows, re-sorted by exact distance: the
    ``:limit`` nearest of them, nearest first."""
    return (
        f"SELECT id, distance FROM ({index_nearest(where, 'candidates')}) i "
        "WHERE distance <> 'NaN' ORDER BY distance, id LIMIT :limit"
    )


def float_array_nearest(where: str) -> str:
    """``(id, distance)`` of the ``:limit`` nearest visible chunks where embeddings are
    ``float8[]`` (``:norm`` is the query vector's norm, ``:dims`` its length)."""
    # Rows of another length come from another embedder's space: not comparable, skipped.
    return (
        "WITH scored AS MATERIALIZED (SELECT c.id, (SELECT 1 - sum(a * b) / "
        "NULLIF(sqrt(sum(a * a)) * :norm, 0) FROM unnest(c.embedding, "
        "CAST(:vector AS float8[])) AS t(a, b)) AS distance FROM api2.kb_chunks c "
        f"WHERE {where} AND cardinality(c.embedding) = :dims) "
        "SELECT id, distance FROM scored WHERE distance IS NOT NULL "
        "ORDER BY distance, id LIMIT :limit"
    )


def text_ranked(where: str) -> str:
    """``(id, rank)`` of the ``:depth`` visible chunks matching ``:query`` by
    ``ts_rank_cd``, best first (rank 1-based)."""
    return (
        "SELECT id, row_number() OVER (ORDER BY score DESC, id) AS rank FROM ("
        "SELECT c.id, ts_rank_cd(c.content_tsv, q) AS score FROM api2.kb_chunks c, "
        f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', :query) q "
        f"WHERE {where} AND c.content_tsv @@ q ORDER BY score DESC, c.id LIMIT :depth) t"
    )


def hybrid(where: str, vector_ranked: str) -> str:
    """The answer of a search: the ``:top_k`` chunks of the reciprocal rank fusion
    (``1 / (:rrf_k + rank)`` summed over both rankings; ties to the better single rank,
    then the smaller id) of ``vector_ranked`` (a query of ``(id, rank)``) and
    :func:`text_ranked`, best first, with what a hit shows: ``id, score, vector_rank,
    text_rank, document_id, knowledge_base_id, position, headline, content, document name,
    document version`` (the headline only for chunks the text matched)."""
    return (
        f"WITH vector_ranked AS MATERIALIZED ({vector_ranked}), "
        f"text_ranked AS MATERIALIZED ({text_ranked(where)}), "
        "fused AS (SELECT id, sum(1.0::float8 / (:rrf_k + rank)) AS score, min(rank) AS best, "
        "min(vector_rank) AS vector_rank, min(text_rank) AS text_rank FROM ("
        "SELECT id, rank, rank AS vector_rank, NULL::bigint AS text_rank FROM vector_ranked "
        "UNION ALL SELECT id, rank, NULL, rank FROM text_ranked) u "
        "GROUP BY id ORDER BY score DESC, best, id LIMIT :top_k) "
        "SELECT f.id, f.score, f.vector_rank, f.text_rank, c.document_id, "
        "c.knowledge_base_id, c.position, CASE WHEN f.text_rank IS NOT NULL THEN "
        f"ts_headline('{TEXT_SEARCH_CONFIG}', c.content, "
        f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', :query), :options) END, c.content, "
        "doc.name, doc.current_version FROM fused f "
        "JOIN api2.kb_chunks c ON c.id = f.id AND c.organization_id = :organization_id "
        "JOIN api2.kb_documents doc ON doc.organization_id = c.organization_id "
        "AND doc.id = c.document_id ORDER BY f.score DESC, f.best, f.id"
    )


def ranked_in_sql(nearest: str) -> str:
    """``(id, rank)`` from a nearest-first ``(id, distance)`` query."""
    return f"SELECT id, row_number() OVER (ORDER BY distance, id) AS rank FROM ({nearest}) n"


def ranked_given() -> str:
    """``(id, rank)`` from ``:vector_ids``, a ranking computed beforehand (best first)."""
    return (
        "SELECT id, rank FROM unnest(CAST(:vector_ids AS bigint[])) WITH ORDINALITY AS v(id, rank)"
    )
