"""Database: engines and sessions, typed models, the tenant-scoped query layer, migrations.

Models live in :mod:`shared.db.models` (``rails`` mirrors Rails-owned tables, ``api2`` holds
this project's); import them from there.
"""

from shared.db.base import API2_SCHEMA, Api2Base, RailsBase, UTCDateTime, utcnow
from shared.db.engine import database_url, make_engine, make_session_factory, session_scope
from shared.db.tenant import get_scoped, organization_filter, require_scoped, select_scoped

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
