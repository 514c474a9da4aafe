"""What retrieval's vector planner knows about a database, remembered between searches.

Each search used to ask the server, before ranking anything, how many chunks the tenant
holds (to choose between the exact scan and the HNSW index) and, on the index path, which
pgvector it runs: one or two round trips before the one that searches, and on a loaded
machine each round trip waits for a scheduler slot on both sides. This module remembers the
answers:

* the server's **layout**, once per engine (it changes only with a migration or an
  extension upgrade): whether pgvector has iterative index scans (0.8) and whether
  ``kb_chunks`` has the compact scan structure of migration ``api2_0006``;
* each scope's **size**, per engine, for ``SCOPE_SIZE_TTL_SECONDS``. The size only chooses
  between two correct paths, so a stale one costs speed, never correctness: a tenant that
  grew past the threshold a few seconds ago is still scanned exactly, a shrunk one walks
  the index, which finds the same visible chunks.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

#: How long a counted scope size is reused.
SCOPE_SIZE_TTL_SECONDS = 30.0
#: The stored half-precision copy of ``kb_chunks.embedding`` and the index carrying it.
HALF_COLUMN = "embedding_half"
SCAN_INDEX = "ix_kb_chunks_scan"
_SAVEPOINT = "search_settings"


@dataclass(frozen=True)
class Layout:
    """What the pgvector server offers retrieval.

    Attributes:
      iterative_scan: pgvector 0.8 or later (``hnsw.iterative_scan``).
      half_scan: ``kb_chunks.embedding_half`` and its covering index ``ix_kb_chunks_scan``
        exist (migration ``api2_0006``).
    """

    iterative_scan: bool
    half_scan: bool


@dataclass(frozen=True)
class _Size:
    count: int  # chunks counted, at most ``cap``
    cap: int
    at: float


_lock = threading.Lock()
_layouts: weakref.WeakKeyDictionary[Engine, Layout] = weakref.WeakKeyDictionary()
_sizes: weakref.WeakKeyDictionary[Engine, dict[tuple[int, int | None], _Size]]
_sizes = weakref.WeakKeyDictionary()


def layout(session: Session) -> Layout:
    """The pgvector server's :class:`Layout`, read from the catalogue once per engine."""
    engine = session.get_bind().engine
    with _lock:
        known = _layouts.get(engine)
    if known is not None:
        return known
    version, half_index = session.execute(
        text(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
            "to_regclass(:index) IS NOT NULL"
        ),
        {"index": f"api2.{SCAN_INDEX}"},
    ).one()
    iterative = False
    if version is not None:
        major, minor = (int(part) for part in str(version).split(".")[:2])
        iterative = (major, minor) >= (0, 8)
    found = Layout(iterative_scan=iterative, half_scan=bool(half_index))
    with _lock:
        _layouts[engine] = found
    return found


def scope_size(
    session: Session, organization_id: int, knowledge_base_id: int | None, cap: int
) -> int:
    """How many chunks the organization (and base) holds, counting at most ``cap``: a
    count of the last ``SCOPE_SIZE_TTL_SECONDS`` when it answers for ``cap``, else an
    index-only count that stays cheap for the small tenants the exact path serves."""
    engine = session.get_bind().engine
    key = (organization_id, knowledge_base_id)
    now = time.monotonic()
    with _lock:
        known = _sizes.get(engine, {}).get(key)
    if known is not None and now - known.at < SCOPE_SIZE_TTL_SECONDS:
        if known.count < known.cap:  # the exact size
            return min(known.count, cap)
        if cap <= known.cap:  # at least known.cap chunks
            return cap
    where = "c.organization_id = :organization_id"
    if knowledge_base_id is not None:
        where += " AND c.knowledge_base_id = :knowledge_base_id"
    statement = f"SELECT count(*) FROM (SELECT 1 FROM api2.kb_chunks c WHERE {where} LIMIT :cap) s"
    params = {"organization_id": organization_id, "knowledge_base_id": knowledge_base_id}
    count = int(session.execute(text(statement), {**params, "cap": cap}).scalar_one())
    with _lock:
        _sizes.setdefault(engine, {})[key] = _Size(count, cap, now)
    return count


def forget_sizes() -> None:
    """Drop every remembered scope size (tests and benchmarks that reload a tenant)."""
    with _lock:
        _sizes.clear()


def execute_with_settings(
    session: Session, settings: dict[str, str], statement: str, params: dict[str, Any]
) -> list[Any]:
    """The rows of ``statement`` (SQLAlchemy ``:name`` parameters) run with ``settings``,
    which are undone afterwards as by :func:`local_settings`, in one round trip: the
    savepoint, the settings, the statement and the rollback to the savepoint go out as one
    psycopg pipeline. The statement only reads."""
    connection = session.connection()
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(f"expected a psycopg connection, got {type(driver).__name__}")
    compiled = str(text(statement).compile(dialect=connection.dialect))
    assignments = ", ".join(
        f"set_config(%(name{i})s, %(value{i})s, true)" for i in range(len(settings))
    )
    names: dict[str, str] = {}
    for i, (name, value) in enumerate(settings.items()):
        names |= {f"name{i}": name, f"value{i}": value}
    setup, cursor = driver.cursor(), driver.cursor()
    try:
        with driver.pipeline():
            setup.execute(f"SAVEPOINT {_SAVEPOINT}")
            setup.execute(f"SELECT {assignments}", names)
            cursor.execute(compiled, params)
            setup.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
            setup.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        return cursor.fetchall()
    finally:
        setup.close()
        cursor.close()


@contextmanager
def local_settings(session: Session, settings: dict[str, str]) -> Iterator[None]:
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
