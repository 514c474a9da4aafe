"""The one layer for tenant-scoped queries.

Every read of tenant data goes through these helpers, which add
``organization_id = :organization_id`` and cannot be called without it. A row of another
organization is indistinguishable from a missing row: both come back as ``None`` (or raise
:class:`~shared.errors.RecordMissing` from :func:`require_scoped`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, inspect, select
from sqlalchemy.orm import Mapper, Session

from shared.errors import RecordMissing

M = TypeVar("M")


def _mapper(model: type[M]) -> Mapper[M]:
    mapper = inspect(model, raiseerr=False)
    if not isinstance(mapper, Mapper):
        raise TypeError(f"{model!r} is not a mapped model")
    return mapper


def _check_organization_id(organization_id: object) -> int:
    if isinstance(organization_id, bool) or not isinstance(organization_id, int):
        raise TypeError(f"organization_id must be an int, got {organization_id!r}")
    return organization_id


def organization_filter(model: type[Any], organization_id: int) -> ColumnElement[bool]:
    """The ``model.organization_id = organization_id`` criterion, for hand-built statements.

    Raises:
      TypeError: when ``model`` has no ``organization_id`` column or the id is not an int.
    """
    mapper = _mapper(model)
    column = mapper.columns.get("organization_id")
    if column is None:
        raise TypeError(f"{mapper.class_.__name__} is not tenant-scoped: no organization_id")
    return column == _check_organization_id(organization_id)


def select_scoped(model: type[M], *, organization_id: int) -> Select[M]:
    """``SELECT model WHERE organization_id = :organization_id``; add further criteria freely.

    Raises:
      TypeError: when ``model`` has no ``organization_id`` column or the id is not an int.
    """
    criterion = organization_filter(model, organization_id)
    return select(model).where(criterion)


def get_scoped(
    session: Session,
    model: type[M],
    id: int,
    *,
    organization_id: int,
    for_update: bool = False,
) -> M | None:
    """The row ``id`` of ``model`` if it belongs to ``organization_id``, else ``None``.

    Parameters:
      for_update: lock the row (``SELECT ... FOR UPDATE``) until the transaction ends.

    Raises:
      TypeError: when ``model`` has no ``organization_id`` column or the id is not an int.
    """
    statement = select_scoped(model, organization_id=organization_id)
    primary_key = _mapper(model).primary_key
    if len(primary_key) != 1:
        raise TypeError(f"{model.__name__} has a composite primary key")
    statement = statement.where(primary_key[0] == id)
    if for_update:
        statement = statement.with_for_update()
    return session.execute(statement).scalar_one_or_none()


def require_scoped(
    session: Session,
    model: type[M],
    id: int,
    *,
    organization_id: int,
    for_update: bool = False,
) -> M:
    """Like :func:`get_scoped`, but a missing or cross-tenant row raises ``RecordMissing``."""
    row = get_scoped(session, model, id, organization_id=organization_id, for_update=for_update)
    if row is None:
        raise RecordMissing(f"{model.__name__} {id} not found in organization {organization_id}")
    return row
