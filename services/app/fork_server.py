"""What the worker pool's fork server loads before it forks a child: importing this module
imports everything a worker process needs before its first job (:data:`MODULES`).

``speedtier worker --processes N`` forks its children from a server process
(``services.app.worker_pool``, multiprocessing's ``forkserver``) whose only preloaded module
is this one. The garbage collector is off while the modules load (no collection walks the
objects they make, about a tenth of their import time), and what they made is then frozen
(``gc.freeze``): a child's collector never walks those objects, so it neither spends time on
them nor touches, and so copies, the memory pages it shares with the server.

The products' declarations are imported here too: every product's ``families`` and
``ticks`` modules (the file roles each has), which its ``register`` imports. Their actors
load later, once a worker consumes (``router.deferred``), and so does SQLAlchemy's ORM
(``shared.db.engine.lazy_session_factory``). The Lua scripts every child's broker sends
are linked here as well (``tiers.lua_scripts.link_all``). A lone worker process
(``--processes 1``) imports this module too: the same modules, loaded the same way.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys

#: The worker's modules (what a child runs, and the pool's module, whose function is a
#: child's entry), the PostgreSQL driver (the engine loads it when it is made), and what a
#: child would otherwise import before its first fetch: its heartbeat, the codec of its first
#: connection's host name, the reader of the Lua scripts' files and the modules the
#: products' ``register`` imports (:data:`REGISTERED`).
MODULES = (
    "services.app.worker_process",
    "services.app.worker_pool",
    "services.app.bootstrap",
    "services.app.warm_up",
    "tiers.worker",
    "shared.heartbeat",
    "psycopg",
    "sqlalchemy.dialects.postgresql.psycopg",
    "encodings.idna",
    "importlib.readers",
)

#: The modules the products' ``register`` imports when it runs (beside their ``families`` and
#: ``ticks``, :func:`declarations`); ``tests/integration/services/app/test_worker_start.py``
#: fails when a worker's bootstrap loads a module the preload left out.
REGISTERED = (
    "services.ingestion.vector_cache",
    "services.maintenance.shadow",
    "services.super_sources.sources",
)


def declarations() -> list[str]:
    """Each product's ``families`` and ``ticks`` modules (those it has)."""
    from services.app.bootstrap import SERVICE_MODULES

    names = [f"{product}.{role}" for product in SERVICE_MODULES for role in ("families", "ticks")]
    return [name for name in names if importlib.util.find_spec(name) is not None]


#: What redis-py's import loads only to offer metrics of its own, which the platform does
#: not turn on (its traces come from ``shared.tracing``).
REDIS_METRICS_SDK = "opentelemetry.sdk.metrics"


def import_redis() -> None:
    """Import redis-py without OpenTelemetry's metrics SDK (about 0.02 s of a start):
    redis-py imports it if it can and otherwise leaves its own metrics unavailable. The
    SDK itself stays importable afterwards; a redis-py that cannot do without it is
    imported with it."""
    if "redis" in sys.modules or REDIS_METRICS_SDK in sys.modules:
        return
    sys.modules[REDIS_METRICS_SDK] = None  # type: ignore[assignment]  # its import fails
    try:
        importlib.import_module("redis")
    except ImportError:
        pass  # the first of MODULES that needs redis imports it, the SDK as well
    finally:
        del sys.modules[REDIS_METRICS_SDK]


def preload() -> None:
    """Import :data:`MODULES` and the declarations with the collector off, then freeze what
    they made."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        import_redis()
        for name in MODULES:
            importlib.import_module(name)
        for name in (*declarations(), *REGISTERED):
            importlib.import_module(name)
        from tiers.lua_scripts import link_all

        link_all()  # what every child's broker sends (tiers.lua_scripts)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


preload()
