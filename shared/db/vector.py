"""Embedding columns: pgvector where the server has it, ``float8[]`` where it has not.

The migration that creates an embedding column decides its storage from the server
(``pg_available_extensions``): ``vector(<dims>)`` with an HNSW index when pgvector is
installable, else ``double precision[]``. The model cannot know which, so it declares
:class:`Embedding`, whose values are ``list[float]`` either way:

* binding: a list of floats is sent as ``float8[]``; pgvector casts ``float8[]`` to
  ``vector`` on assignment, so INSERT and UPDATE work on both storages.
* results: a ``float8[]`` arrives as a list, a ``vector`` as its text form ``[1,2,3]``
  (psycopg has no loader for it); both come back as ``list[float]``.

Changing an embedder's dimension needs a new migration (``vector(<dims>)`` is fixed in the
column); :func:`embedding_storage` reads what the column actually is, so code can refuse a
mismatch clearly instead of failing on an INSERT.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Dialect, Engine, TypeDecorator, text
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine, UserDefinedType

#: The dimension of the embedding columns' ``vector`` type: the hashing embedder's default.
DEFAULT_DIMENSIONS = 384


class Vector(UserDefinedType[list[float]]):
    """pgvector's ``vector(<dims>)``, for DDL and for reflection of an existing column."""

    cache_ok = True

    def __init__(self, dims: int | None = None) -> None:
        self.dims = dims

    def get_col_spec(self, **kw: Any) -> str:
        return "vector" if self.dims is None else f"vector({self.dims})"


class HalfVector(Vector):
    """pgvector's ``halfvec(<dims>)`` (16-bit floats), for reflection of
    ``kb_chunks.embedding_half`` (migration ``api2_0006``)."""

    def get_col_spec(self, **kw: Any) -> str:
        return "halfvec" if self.dims is None else f"halfvec({self.dims})"


# Reflection (autogenerate's comparison) names the types instead of warning about them.
ischema_names.setdefault("vector", Vector)
ischema_names.setdefault("halfvec", HalfVector)


def parse_vector(value: object) -> list[float] | None:
    """A stored embedding as floats: a ``float8[]`` list, or pgvector's text ``[1,2,3]``."""
    if value is None:
        return None
    if isinstance(value, str):
        body = value.strip().removeprefix("[").removesuffix("]").strip()
        return [float(part) for part in body.split(",")] if body else []
    if isinstance(value, Sequence):
        return [float(part) for part in value]
    raise TypeError(f"cannot read an embedding from {type(value).__name__}")


def vector_literal(values: Sequence[float]) -> str:
    """pgvector's text form of ``values`` (``'[1.0,2.0]'``), for ``CAST(:q AS vector)``."""
    return "[" + ",".join(repr(float(value)) for value in values) + "]"


class Embedding(TypeDecorator[list[float]]):
    """An embedding column seen as ``list[float]``, stored as ``vector(dims)`` or ``float8[]``.

    The DDL the model would emit is ``float8[]`` (the fallback); the migration creates the
    real column. Parameters:
      dims: the vector length the ``vector`` storage is declared with.
    """

    impl = ARRAY(DOUBLE_PRECISION)
    cache_ok = True

    def __init__(self, dims: int = DEFAULT_DIMENSIONS) -> None:
        super().__init__()
        self.dims = dims

    def process_bind_param(
        self, value: Sequence[float] | None, dialect: Dialect
    ) -> list[float] | None:
        # psycopg refuses lists mixing int and float; pgvector accepts any float8[].
        return None if value is None else [float(part) for part in value]

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], list[float] | None]:
        # Not the ARRAY's own processor: it rejects pgvector's type oid.
        return parse_vector


@dataclass(frozen=True)
class EmbeddingStorage:
    """What an embedding column is on this database.

    Attributes:
      kind: ``vector`` (pgvector) or ``float8[]``.
      dims: the declared length of a ``vector`` column; None for ``float8[]``.
    """

    kind: Literal["vector", "float8[]"]
    dims: int | None

    @property
    def is_pgvector(self) -> bool:
        return self.kind == "vector"


_storage_cache: weakref.WeakKeyDictionary[Engine, dict[str, EmbeddingStorage]]
_storage_cache = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def embedding_storage(session: Session, table: str = "api2.kb_chunks") -> EmbeddingStorage:
    """The storage of ``table``'s ``embedding`` column, read from the catalogue once per
    engine (the column's type changes only with a migration).

    Raises:
      LookupError: when the table has no ``embedding`` column (not migrated).
    """
    engine = session.get_bind().engine
    with _cache_lock:
        known = _storage_cache.get(engine, {}).get(table)
    if known is not None:
        return known
    row = session.execute(
        text(
            "SELECT t.typname, a.atttypmod FROM pg_attribute a "
            "JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding' "
            "AND NOT a.attisdropped"
        ),
        {"table": table},
    ).one_or_none()
    if row is None:
        raise LookupError(f"{table} has no embedding column; is the database migrated?")
    typname, typmod = row
    storage = (
        EmbeddingStorage("vector", int(typmod) if typmod and typmod > 0 else None)
        if typname == "vector"
        else EmbeddingStorage("float8[]", None)
    )
    with _cache_lock:
        _storage_cache.setdefault(engine, {})[table] = storage
    return storage


def has_pgvector(session: Session) -> bool:
    """Whether the chunk embeddings are stored with pgvector (cached per engine)."""
    return embedding_storage(session).is_pgvector


# -- autogenerate hooks (used by shared/migrations/env.py and the migration tests) ----------

#: Indexes that exist only where pgvector does; the models cannot declare them.
PGVECTOR_ONLY_INDEXES = frozenset({"ix_kb_chunks_embedding_hnsw", "ix_kb_chunks_scan"})
#: Columns that exist only where pgvector does: ``kb_chunks.embedding_half``, the
#: half-precision copy retrieval's exact scan reads (migration ``api2_0006``).
PGVECTOR_ONLY_COLUMNS = frozenset({"embedding_half"})
#: The name of a large tenant's own HNSW index, followed by its organization id; operators
#: create them (``services.ingestion.tenant_index``), no migration or model declares them.
TENANT_INDEX_PREFIX = "ix_kb_chunks_hnsw_org_"
#: Tables that exist only where pgvector does: ``kb_chunk_changes``, the log retrieval's
#: vector cache checks (migration ``api2_0007``).
PGVECTOR_ONLY_TABLES = frozenset({"kb_chunk_changes"})


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Leave pgvector-only tables, indexes and columns out of autogenerate: the migrations
    create them only on a server with pgvector, so the models (which serve both storages)
    do not declare them; nor do they declare tenants' own HNSW indexes, which operators
    create."""
    if not reflected:
        return True
    if type_ == "table":
        return name not in PGVECTOR_ONLY_TABLES
    if type_ == "index":
        return not (name in PGVECTOR_ONLY_INDEXES or str(name).startswith(TENANT_INDEX_PREFIX))
    return not (type_ == "column" and name in PGVECTOR_ONLY_COLUMNS)


def compare_type(
    context: object,
    inspected_column: object,
    metadata_column: Any,
    inspected_type: TypeEngine[Any],
    metadata_type: TypeEngine[Any],
) -> bool | None:
    """Embedding columns match either storage: the model says ``float8[]`` and the database
    may hold ``vector(dims)`` instead (chosen by the migration from the server). Everything
    else gets Alembic's own comparison (None)."""
    if isinstance(metadata_type, Embedding):
        return not isinstance(inspected_type, Vector | ARRAY)
    return None
