"""Tenants' vectors kept in the searching process, within a memory budget.

What is kept (:class:`TenantVectors`: one tenant's chunk ids, knowledge bases and
unit-length vectors, and the snapshot they were read under) and how much: at most
``search_cache_mb`` MiB per process and database (``SPEEDTIER_SEARCH_CACHE_MB``, default
64; ``0`` turns the cache off), about 1.6 kB a chunk at 384 dimensions (15 MiB for a
10,000-chunk tenant), least recently used tenants evicted first; a tenant larger than the
whole budget is never kept. Each process of an API server holds its own. How entries are
read, checked and ranked against is :mod:`services.ingestion.vector_ranking`'s; this
module imports nothing heavy, so registering the product does not load numpy.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

from shared import metrics

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy.orm import Session

CACHE_BYTES = metrics.gauge(
    "search_cache_bytes", "Bytes of tenants' vectors kept for retrieval's exact ranking."
)
DEFAULT_CACHE_MB = 64.0
CHANGES_TABLE = "api2.kb_chunk_changes"
_budget_mib = DEFAULT_CACHE_MB


def configure(megabytes: float) -> None:
    """Set this process's budget (``Settings.search_cache_mb``; the product's registration
    calls it) and drop what is kept."""
    global _budget_mib
    if not megabytes >= 0:
        raise ValueError(f"the search cache budget must be >= 0 MiB, got {megabytes!r}")
    _budget_mib = float(megabytes)
    forget_caches()


@dataclass(frozen=True)
class TenantVectors:
    """One tenant's chunk vectors as read under ``snapshot``.

    Attributes:
      ids / bases: each chunk's id and knowledge base.
      unit: each chunk's embedding divided by its length (chunks with a zero vector have no
        cosine distance and are left out, as the SQL ranking leaves them out).
    """

    snapshot: str
    loaded_at: float
    ids: np.ndarray
    bases: np.ndarray
    unit: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.bases.nbytes + self.unit.nbytes)


class VectorCache:
    """Least-recently-used tenants' :class:`TenantVectors`, at most ``max_bytes`` in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, TenantVectors] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, organization_id: int) -> TenantVectors | None:
        with self._lock:
            entry = self._entries.get(organization_id)
            if entry is not None:
                self._entries.move_to_end(organization_id)
            return entry

    def put(self, organization_id: int, entry: TenantVectors) -> None:
        with self._lock:
            self._drop(organization_id)
            if entry.nbytes > self.max_bytes:
                return
            self._entries[organization_id] = entry
            self._bytes += entry.nbytes
            CACHE_BYTES.inc(entry.nbytes)
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def forget(self, organization_id: int) -> None:
        with self._lock:
            self._drop(organization_id)

    def clear(self) -> None:
        with self._lock:
            for organization_id in list(self._entries):
                self._drop(organization_id)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _drop(self, organization_id: int) -> None:
        entry = self._entries.pop(organization_id, None)
        if entry is not None:
            self._bytes -= entry.nbytes
            CACHE_BYTES.dec(entry.nbytes)


_caches_lock = threading.Lock()
_caches: weakref.WeakKeyDictionary[Engine, VectorCache | None] = weakref.WeakKeyDictionary()


def cache_for(session: Session) -> VectorCache | None:
    """This engine's cache, or None where it is turned off or the database has no change
    log (migration ``api2_0007`` runs only where ``embedding`` is a pgvector ``vector``)."""
    engine = session.get_bind().engine
    with _caches_lock:
        if engine in _caches:
            return _caches[engine]
    budget = int(_budget_mib * 1024 * 1024)
    has_log = session.execute(
        text("SELECT to_regclass(:table) IS NOT NULL"), {"table": CHANGES_TABLE}
    ).scalar_one()
    cache = VectorCache(budget) if budget > 0 and has_log else None
    with _caches_lock:
        return _caches.setdefault(engine, cache)


def forget_caches() -> None:
    """Drop every engine's cache."""
    with _caches_lock:
        for cache in _caches.values():
            if cache is not None:
                cache.clear()
        _caches.clear()
