"""Ranking from tenants' vectors kept in the searching process: the exact vector ranking
without reading them from PostgreSQL on every query.

The exact path of retrieval (:mod:`services.ingestion.search`) scores every chunk a tenant
holds. In PostgreSQL that reads each chunk's half-precision vector from the covering index
(~8 MB for a tenant of 10,000 chunks) on every query, which is most of a search's time.
This module reads a tenant's vectors once (one binary ``COPY``), keeps them as unit-length
``float32`` rows, and ranks a query against them with one matrix-vector product.

Nothing the cache holds decides what a caller may see. Its ranking only proposes
candidates, nearest first; the search's own criteria (organization, knowledge base,
audience, deleted documents) filter them in SQL, and the ranking is the visible chunks in
the cache's order. When fewer than ``limit`` candidates survive the filter and the tenant
has more chunks, the candidate list is widened (four times, up to all of them), so the
answer is the exact ranking of the visible chunks.

Freshness is exact. Migration ``api2_0007`` logs every transaction that writes a tenant's
chunks (``api2.kb_chunk_changes``). A load records the snapshot it read under; before each
use, the same statement that filters the candidates asks whether a transaction not visible
in that snapshot has written the tenant's chunks since. If one has, the tenant's vectors
are read again (and used at once, unchecked: they are as new as the searching
transaction's own view), unless they were read less than ``RELOAD_INTERVAL_SECONDS`` ago:
then this search ranks in SQL as without the cache, so a tenant being ingested is re-read
at most that often. Entries are also reloaded after ``MAX_AGE_SECONDS``, whatever the log
says. Vectors read by a transaction that has itself written the tenant's chunks
(uncommitted, they may roll back) serve that search only and are not kept. A transaction
whose snapshot is older than a kept entry's (``REPEATABLE READ`` begun earlier) ranks by
the newer vectors; the filter still shows it only the chunks its snapshot sees.

A process that searches through the cache runs BLAS on one thread (see
:func:`_one_blas_thread`).

What is kept, and how much, is :mod:`services.ingestion.vector_cache`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session
from threadpoolctl import threadpool_limits

from services.ingestion.vector_cache import CHANGES_TABLE, TenantVectors, cache_for
from shared import metrics

#: A loaded tenant is read again after this long, changed or not.
MAX_AGE_SECONDS = 600.0
#: A tenant found changed is read again only if its vectors are at least this old; until
#: then its searches rank in SQL (a tenant being written to all the time is not re-read on
#: every search).
RELOAD_INTERVAL_SECONDS = 10.0
#: The first candidate list is this many times ``limit``.
CANDIDATE_FACTOR = 2
RANKINGS = metrics.counter(
    "search_vector_rankings",
    "Exact-path vector rankings by where the vectors came from: kept (the process's copy), "
    "read (read into it for this search), sql (ranked in PostgreSQL instead).",
    ["source"],
)
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_blas_limited = False


def nearest_visible(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int | None,
    where: str,
    params: dict[str, Any],
    vector: Sequence[float],
    limit: int,
    dims: int,
) -> list[tuple[int, float]] | None:
    """``(id, cosine distance)`` of the ``limit`` chunks nearest to ``vector`` among those
    ``where`` (visibility criteria on ``api2.kb_chunks c``, with ``params``) lets through,
    nearest first; None when the cache cannot answer (off, or the tenant keeps changing),
    and the caller ranks in SQL."""
    cache = cache_for(session)
    if cache is not None:
        _one_blas_thread()
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if cache is None or not norm > 0.0 or query.shape != (dims,):
        return None
    query /= norm
    for _attempt in range(2):
        entry = cache.get(organization_id)
        age = math.inf if entry is None else time.monotonic() - entry.loaded_at
        loaded_now = entry is None or age > MAX_AGE_SECONDS
        if entry is None or loaded_now:
            entry, shareable = load(session, organization_id, dims)
            if entry is None:
                RANKINGS.labels("sql").inc()
                return None
            if shareable:
                cache.put(organization_id, entry)
        found = _filtered(
            session, entry, query, knowledge_base_id, where, params, limit, check=not loaded_now
        )
        if found is not None:
            RANKINGS.labels("read" if loaded_now else "kept").inc()
            return found
        if age < RELOAD_INTERVAL_SECONDS:
            # Changed again soon after it was read: SQL ranks until it settles.
            RANKINGS.labels("sql").inc()
            return None
        cache.forget(organization_id)
    return None


def _filtered(
    session: Session,
    entry: TenantVectors,
    query: np.ndarray,
    knowledge_base_id: int | None,
    where: str,
    params: dict[str, Any],
    limit: int,
    *,
    check: bool,
) -> list[tuple[int, float]] | None:
    """The visible ``limit`` nearest, widening the candidates as needed; None when
    ``check`` finds the entry stale (an entry read in this call is not checked: it is as
    new as this transaction's view, its own writes included)."""
    ids, distances = _in_scope(entry, query, knowledge_base_id)
    take = min(len(ids), CANDIDATE_FACTOR * limit)
    stale = (
        f"EXISTS (SELECT 1 FROM {CHANGES_TABLE} x WHERE x.organization_id IN "
        "(:organization_id, 0) AND x.txid >= "
        "pg_snapshot_xmin(CAST(:snapshot AS pg_snapshot))::text::bigint AND NOT "
        "pg_visible_in_snapshot(x.txid::text::xid8, CAST(:snapshot AS pg_snapshot)))"
    )
    statement = text(
        f"SELECT {stale if check else 'false'}, ARRAY(SELECT v.id FROM "
        "unnest(CAST(:candidates AS bigint[])) WITH ORDINALITY AS v(id, ord) "
        f"JOIN api2.kb_chunks c ON c.id = v.id WHERE {where} ORDER BY v.ord LIMIT :limit)"
    )
    while True:
        candidates = _nearest(ids, distances, take)
        values = {**params, "snapshot": entry.snapshot, "candidates": list(candidates)}
        is_stale, visible = session.execute(statement, values | {"limit": limit}).one()
        if is_stale:
            return None
        if len(visible) >= limit or take >= len(ids):
            return [(int(chunk_id), candidates[chunk_id]) for chunk_id in visible]
        take = min(len(ids), take * 4)


def _in_scope(
    entry: TenantVectors, query: np.ndarray, knowledge_base_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The entry's chunk ids in the searched scope and their cosine distances."""
    if knowledge_base_id is None:
        return entry.ids, 1.0 - entry.unit @ query
    rows = np.flatnonzero(entry.bases == knowledge_base_id)
    return entry.ids[rows], 1.0 - entry.unit[rows] @ query


def _nearest(ids: np.ndarray, distances: np.ndarray, take: int) -> dict[int, float]:
    """The ``take`` ids of least distance with their distances, nearest first (ties to the
    smaller id)."""
    if take <= 0:
        return {}
    if take < len(ids):
        picked = np.argpartition(distances, take - 1)[:take]
        ids, distances = ids[picked], distances[picked]
    order = np.lexsort((ids, distances))
    return dict(zip(ids[order].tolist(), distances[order].tolist(), strict=True))


def load(session: Session, organization_id: int, dims: int) -> tuple[TenantVectors | None, bool]:
    """Read a tenant's vectors (binary ``COPY`` on the session's connection, in its
    transaction) and the snapshot they are at least as new as; None if a row is not in the
    expected shape (another dimension). The flag says whether other transactions may use
    them: not when this transaction has written the tenant's chunks itself (they might
    roll back)."""
    connection = session.connection()
    # Taken before the COPY's own snapshot: a write committed between the two is in the
    # data but also seen as "after the snapshot", which costs one reload, never a miss.
    snapshot, own_writes = connection.execute(
        text(
            "SELECT pg_current_snapshot()::text, EXISTS (SELECT 1 FROM "
            f"{CHANGES_TABLE} WHERE organization_id IN (:organization_id, 0) "
            "AND txid = pg_current_xact_id_if_assigned()::text::bigint)"
        ),
        {"organization_id": organization_id},
    ).one()
    driver = connection.connection.driver_connection
    assert driver is not None  # a connection in use always has its driver's
    statement = (
        "COPY (SELECT id, knowledge_base_id, embedding FROM api2.kb_chunks "
        f"WHERE organization_id = {int(organization_id)}) TO STDOUT (FORMAT binary)"
    )
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        data = b"".join(bytes(block) for block in copy)
    rows = _parse_rows(data, dims)
    if rows is None:
        return None, False
    vectors = rows["x"].astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1)
    keep = np.isfinite(norms) & (norms > 0.0)
    entry = TenantVectors(
        snapshot=str(snapshot),
        loaded_at=time.monotonic(),
        ids=rows["id"][keep].astype(np.int64),
        bases=rows["kb"][keep].astype(np.int64),
        unit=np.ascontiguousarray(vectors[keep] / norms[keep, None]),
    )
    return entry, not own_writes


def _row_type(dims: int) -> np.dtype:
    """One row of the binary COPY: three fields, two ``bigint`` and a pgvector ``vector``
    (its binary form: ``int16`` dimensions, ``int16`` unused, ``float4`` values)."""
    return np.dtype(
        [
            ("fields", ">i2"),
            ("id_length", ">i4"),
            ("id", ">i8"),
            ("kb_length", ">i4"),
            ("kb", ">i8"),
            ("vector_length", ">i4"),
            ("dims", ">i2"),
            ("unused", ">i2"),
            ("x", ">f4", (dims,)),
        ]
    )


def _parse_rows(data: bytes, dims: int) -> np.ndarray | None:
    if not data.startswith(_COPY_SIGNATURE) or len(data) < 21:
        return None
    extension = int.from_bytes(data[15:19], "big")
    body = memoryview(data)[19 + extension : -2]
    row_type = _row_type(dims)
    if len(body) % row_type.itemsize:
        return None
    rows = np.frombuffer(body, dtype=row_type)
    expected = (
        (rows["fields"] == 3).all()
        and (rows["id_length"] == 8).all()
        and (rows["kb_length"] == 8).all()
        and (rows["vector_length"] == 4 + 4 * dims).all()
        and (rows["dims"] == dims).all()
    )
    return rows if expected else None


def _one_blas_thread() -> None:
    """Run BLAS on one thread in this process, once. A query's matrix-vector product is
    bound by memory, not arithmetic: OpenBLAS's default (a thread per core) gains nothing
    there and, busy-waiting against the server's own threads and processes on a loaded
    machine, took a 10,000-chunk product from 0.6 ms to 170 ms at p95."""
    global _blas_limited
    if not _blas_limited:
        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True
