"""The psycopg connection under a SQLAlchemy session, for what SQLAlchemy's execute path
costs too much on or cannot do (a ``COPY``, a fixed statement run for every job, which the
driver prepares once per connection), with errors raised as SQLAlchemy raises them for its
own statements (``IntegrityError`` for a foreign key, ``OperationalError`` for a lost
connection...), so callers see one kind."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def driver_connection(session: Session) -> psycopg.Connection[Any]:
    """The psycopg connection under the session's current transaction.

    Raises:
      TypeError: the session's engine does not use psycopg.
    """
    connection = session.connection().connection.driver_connection
    if not isinstance(connection, psycopg.Connection):
        raise TypeError(f"expected a psycopg connection, not {type(connection).__name__}")
    return connection


@contextmanager
def as_sqlalchemy_errors(
    statement: str, parameters: Mapping[str, Any] | Sequence[Any] | None
) -> Iterator[None]:
    """Raise a psycopg error of the block as SQLAlchemy's ``DBAPIError`` of its kind."""
    try:
        yield
    except psycopg.Error as exc:
        raise DBAPIError.instance(statement, parameters, exc, psycopg.Error) from exc


def driver_execute(
    session: Session,
    statement: str,
    parameters: Mapping[str, Any] | Sequence[Any],
    *,
    binary: bool = False,
) -> tuple[Any, ...] | None:
    """Run ``statement`` (psycopg ``%s`` / ``%(name)s`` parameters) in the session's
    transaction on its psycopg connection; its first row, or None.

    Parameters:
      binary: ask for the row in binary (a ``bytea`` then comes as its bytes, not as hex
        text twice their size that both sides encode and decode).
    """
    connection = driver_connection(session)
    with as_sqlalchemy_errors(statement, parameters):
        return connection.execute(statement, parameters, binary=binary).fetchone()
