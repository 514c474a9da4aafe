"""Is this error our own infrastructure being down (PostgreSQL, Redis), not the job failing?

An outage of the platform's own stores says nothing about the job: the job waits for them to
come back (a delay, attempt not spent) instead of spending its attempts and reaching the dead
letter during a database restart. Only connection-level failures count; a query error, a
constraint violation or a statement timeout is the job's own failure.
"""

from __future__ import annotations

import psycopg
import redis
import sqlalchemy.exc

#: SQLSTATEs of a server going away: admin shutdown, crash shutdown, cannot connect now.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def _is_outage_error(error: BaseException) -> bool:
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return True
    if isinstance(error, sqlalchemy.exc.DBAPIError):
        if error.connection_invalidated:
            return True
        return error.orig is not None and _is_outage_error(error.orig)
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
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
