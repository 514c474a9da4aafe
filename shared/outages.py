"""Is this error our own infrastructure being down (PostgreSQL, Redis), not the job failing?

An outage of the platform's own stores says nothing about the job: the job waits for them to
come back (a delay, attempt not spent) instead of spending its attempts and reaching the dead
letter during a database restart. Only connection-level failures count; a query error, a
constraint violation or a statement timeout is the job's own failure.

A Redis out of memory (``maxmemory`` under ``noeviction``) or read-only (a replica during a
failover) is an outage too, and so is a PostgreSQL that cannot take writes for now: a
failover promotes a replica while the old primary refuses writes or shuts down, and a
managed service flips a database read-only while it resizes or fails over.

==========================================  =======  =====================================
PostgreSQL says                             SQLSTATE outage?
==========================================  =======  =====================================
connection refused, lost, reset             08xxx    yes (and any error without a SQLSTATE)
admin shutdown, crash shutdown, cannot      57P01,   yes (a failover, a restart)
connect now (starting up, in recovery)      57P02,
                                            57P03
read-only transaction (a standby, a         25006    yes
database or session set
``default_transaction_read_only``)
hot standby: statement cancelled by a       40001    no (a serialization failure is the
conflict with recovery                               job's to retry)
anything else (query error, statement       ...      no
timeout, constraint violation)
==========================================  =======  =====================================

This module imports neither SQLAlchemy nor psycopg: a process that never loaded them cannot
have raised their errors, and a worker whose jobs never touch PostgreSQL should not carry
them (about 20 MiB).
"""

from __future__ import annotations

import sys
from typing import Any

import redis

#: A Redis that answers but refuses writes for now: out of memory (``maxmemory`` under
#: ``noeviction``), or a read-only replica during a failover.
_REDIS_REFUSING = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
#: SQLSTATEs of a server going away: admin shutdown, crash shutdown, cannot connect now.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})
#: SQLSTATE of a write refused because the server or database is read-only (a standby, a
#: failover in progress, ``default_transaction_read_only``).
READ_ONLY_SQLSTATE = "25006"


def _is_outage_error(error: BaseException) -> bool:
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError, *_REDIS_REFUSING)):
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
    if psycopg is not None and isinstance(error, psycopg.Error):
        return getattr(error, "sqlstate", None) == READ_ONLY_SQLSTATE
    return False


def is_infrastructure_outage(error: BaseException) -> bool:
    """True when ``error``, or an error it was raised from, is a lost connection to
    PostgreSQL or Redis, or a PostgreSQL that refuses writes for now (the table above)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if _is_outage_error(current):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
