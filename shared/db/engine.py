"""Engines and sessions. Nothing here connects at import time, and nothing here imports
SQLAlchemy's ORM before a session factory is made (:func:`lazy_session_factory`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url

if TYPE_CHECKING:
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
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(bind=engine, expire_on_commit=False)


class _LazySessionFactory:
    """:func:`make_session_factory` of ``engine``, made at its first use (a call or any
    attribute of a ``sessionmaker``). Two threads that both use it first may both make one:
    they are alike, and the first stays."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._factory: sessionmaker[Session] | None = None

    def _made(self) -> sessionmaker[Session]:
        if self._factory is None:
            self._factory = make_session_factory(self._engine)
        return self._factory

    def __call__(self, **options: Any) -> Session:
        return self._made()(**options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __repr__(self) -> str:
        return f"lazy_session_factory({self._engine!r})"


def lazy_session_factory(engine: Engine) -> sessionmaker[Session]:
    """:func:`make_session_factory` of ``engine``, made (and the ORM imported) at its first
    use: a worker hands it to its products when it starts, and loads the ORM only once a
    job opens a session (``docs/deploy/scaling.md``, a new worker's start)."""
    return cast("sessionmaker[Session]", _LazySessionFactory(engine))


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
