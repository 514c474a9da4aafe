"""What the worker pool's fork server loads before it forks a child: importing this module
imports everything a worker process needs before its first job (:data:`MODULES`).

``speedtier worker --processes N`` forks its children from a server process
(``services.app.worker_pool``, multiprocessing's ``forkserver``) whose only preloaded module
is this one. The garbage collector is off while the modules load (no collection walks the
objects they make, about a tenth of their import time), and what they made is then frozen
(``gc.freeze``): a child's collector never walks those objects, so it neither spends time on
them nor touches, and so copies, the memory pages it shares with the server.

The products' declarations are imported here too: every product's ``families`` and
``ticks`` modules (the file roles each has), which its ``register`` imports; their actors
load later, once a worker consumes (``router.deferred``).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util

#: The worker's modules, the PostgreSQL driver (the engine loads it when it is made) and the
#: program's command line, which a child would import anyway.
MODULES = (
    "services.app.cli",
    "services.app.cli.worker",
    "services.app.bootstrap",
    "services.app.warm_up",
    "tiers.worker",
    "psycopg",
    "sqlalchemy.dialects.postgresql.psycopg",
)


def declarations() -> list[str]:
    """Each product's ``families`` and ``ticks`` modules (those it has)."""
    from services.app.bootstrap import SERVICE_MODULES

    names = [f"{product}.{role}" for product in SERVICE_MODULES for role in ("families", "ticks")]
    return [name for name in names if importlib.util.find_spec(name) is not None]


def preload() -> None:
    """Import :data:`MODULES` and the declarations with the collector off, then freeze what
    they made."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in MODULES:
            importlib.import_module(name)
        for name in declarations():
            importlib.import_module(name)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


preload()
