"""What a command says when the infrastructure under it fails: one line naming the cause,
instead of a traceback (``speedtier`` exits 1).

Only failures a user fixes outside the code are turned into a line: an unreachable or
refusing Redis or PostgreSQL, a database the migrations have not reached, a queue that could
not take the work, a settings value or a path that cannot be used, a host whose clock is off
Redis's. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import redis

from shared.clock_offset import UnsafeClock
from shared.errors import NotConfigured, QueueUnavailable
from shared.redis_persistence import VolatileRedis

MIGRATE = "run `speedtier db upgrade`"


def one_line(error: BaseException) -> str | None:
    """The line a command ends with for ``error``; None when it is not an infrastructure
    failure (the traceback stays)."""
    if isinstance(error, VolatileRedis | UnsafeClock | NotConfigured | QueueUnavailable):
        return str(error)
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return f"Redis unreachable: {_first_line(error)} (check REDIS_URL)"
    if isinstance(error, OSError) and error.filename is not None:
        # A path a setting names that cannot be used: a file where a directory belongs, a
        # directory that cannot be created (SPEEDTIER_DATA_DIR, PROMETHEUS_MULTIPROC_DIR).
        return f"{error.strerror or type(error).__name__}: {error.filename}"
    return _database(error)


def _database(error: BaseException) -> str | None:
    from sqlalchemy import exc as sql

    original = getattr(error, "orig", None)
    if isinstance(error, sql.ProgrammingError) and type(original).__name__ == "UndefinedTable":
        return f"the database is not migrated ({_first_line(original)}): {MIGRATE}"
    # Connecting failed (refused, timed out, dropped); a deadlock or a cancelled statement,
    # also OperationalErrors, are not a reachability problem and keep their traceback.
    connecting = type(original).__name__ in ("OperationalError", "ConnectionTimeout")
    if isinstance(error, sql.InterfaceError) or (
        isinstance(error, sql.OperationalError) and connecting
    ):
        return f"PostgreSQL unreachable: {_first_line(original or error)} (check DATABASE_URL)"
    if isinstance(error, sql.DataError):
        return f"the database refused a value: {_first_line(original or error)}"
    return None


def _first_line(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
