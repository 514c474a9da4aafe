"""Keyset pages: rows by id, ``limit`` at a time after the last id the caller saw."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

Row = TypeVar("Row")


def keyset_page(
    session: Session,
    statement: Select[Row],
    id_column: InstrumentedAttribute[Any],
    *,
    limit: int,
    after_id: int | None,
) -> list[Row]:
    """The rows of ``statement`` by ``id_column``, ``limit`` of them after ``after_id``."""
    if after_id is not None:
        statement = statement.where(id_column > after_id)
    return list(session.scalars(statement.order_by(id_column).limit(limit)))
