"""Database: engines and sessions, typed models, the tenant-scoped query layer, migrations.

Models live in :mod:`shared.db.models` (``rails`` mirrors Rails-owned tables, ``api2`` holds
this project's); import them from there.

The names below load with their module at first use, not with this package: a worker
imports :mod:`shared.db.engine` before its first job, and SQLAlchemy's ORM (the models, the
tenant layer, sessions) only when a job or a command needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.db.base import API2_SCHEMA, Api2Base, RailsBase, UTCDateTime, utcnow
    from shared.db.engine import database_url, make_engine, make_session_factory, session_scope
    from shared.db.tenant import get_scoped, organization_filter, require_scoped, select_scoped

#: Each exported name and the module that defines it.
_EXPORTS = {
    "API2_SCHEMA": "shared.db.base",
    "Api2Base": "shared.db.base",
    "RailsBase": "shared.db.base",
    "UTCDateTime": "shared.db.base",
    "utcnow": "shared.db.base",
    "database_url": "shared.db.engine",
    "make_engine": "shared.db.engine",
    "make_session_factory": "shared.db.engine",
    "session_scope": "shared.db.engine",
    "get_scoped": "shared.db.tenant",
    "organization_filter": "shared.db.tenant",
    "require_scoped": "shared.db.tenant",
    "select_scoped": "shared.db.tenant",
}

__all__ = [
    "API2_SCHEMA",
    "Api2Base",
    "RailsBase",
    "UTCDateTime",
    "database_url",
    "get_scoped",
    "make_engine",
    "make_session_factory",
    "organization_filter",
    "require_scoped",
    "select_scoped",
    "session_scope",
    "utcnow",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
