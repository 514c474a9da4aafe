"""Is this error our own infrastructure being down (PostgreSQL, Redis), not the job failing?

An outage of the platform's own stores says nothing about the job: the job waits for them to
come back (a delay, attempt not spent) instead of spending its attempts and reaching the dead
letter during a database restart. Only connection-level failures count; a query error, a
constraint violation or a statement timeout is the job's own failure.

This module imports neither SQLAlchemy nor psycopg: a process that never loaded them cannot
have raised their errors, and a worker whose jobs never touch PostgreSQL should not carry
them (about 20 MiB).
"""

from __future__ import annotations

import sys
from typing import Any

import redis

#: SQLSTATEs of a server going away: admin shutdown, crash shutdown, cannot connect now.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def _is_outage_error(error: BaseException) -> bool:
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return True
    sqlalchemy_errors: Any = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_errors is not None and isinstance(error, sqlalchemy_errors.DBAPIError):
        if error.connection_invalidated:
            return True
        orig = error.orig
        return orig is not None and _is_outage_error(orig)
    psycopg: Any = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        state = getattr(error, "sqlstate", None)
        return state is None or state.startswith("08") or state in _SERVER_GONE
    return False


def is_infrastructure_outage(error: BaseException) -> bool:
    """True when ``error``, or an error it was raised from, is a lost connection to
    PostgreSQL or Redis."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if _is_outage_error(current):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
