"""Engines and sessions. Nothing here connects at import time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

_PSYCOPG_DRIVER = "postgresql+psycopg"
_PLAIN_POSTGRES = ("postgres", "postgresql")


#: How long opening a connection may take before it fails (libpq's ``connect_timeout``).
CONNECT_TIMEOUT_SECONDS = 10


def database_url(url: str | URL) -> URL:
    """Parse a PostgreSQL URL and pin it to the psycopg 3 driver.

    ``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://``.

    Raises:
      ValueError: for a URL of another database or driver.
    """
    parsed = make_url(url)
    if parsed.drivername in _PLAIN_POSTGRES:
        return parsed.set(drivername=_PSYCOPG_DRIVER)
    if parsed.drivername != _PSYCOPG_DRIVER:
        raise ValueError(
            f"expected a postgresql:// URL (psycopg 3), got driver {parsed.drivername!r}"
        )
    return parsed


def make_engine(url: str | URL, **engine_options: Any) -> Engine:
    """An engine on ``url`` through psycopg 3, with pre-ping and the session time zone UTC.

    Rails keeps UTC in ``timestamp without time zone`` columns; a UTC session makes
    ``now()`` in SQL and aware datetimes from Python agree with it.

    Parameters:
      url: a ``postgresql://`` (or ``postgresql+psycopg://``) URL.
      engine_options: passed to :func:`sqlalchemy.create_engine` (``poolclass``, ``echo``...).
    """
    options: dict[str, Any] = {
        "pool_pre_ping": True,
        "connect_args": {
            "options": "-c timezone=UTC",
            "application_name": "speedtier",
            # A server that accepts the connection and never answers (a wrong port, a
            # stuck proxy) fails the attempt instead of hanging it: libpq has no limit.
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        },
    }
    options.update(engine_options)
    return create_engine(database_url(url), **options)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``.

    Objects stay readable after commit (``expire_on_commit=False``) so a unit can enqueue
    follow-ups with the ids it just committed without another round trip.
    """
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A unit of work: commit explicitly with ``session.commit()``; leaving rolls back.

    Whatever was not committed when the block ends, normally or by an exception, is
    rolled back, and the session is closed.
    """
    session = factory()
    try:
        yield session
    finally:
        session.rollback()
        session.close()
