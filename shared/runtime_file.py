"""Where a running ``speedtier up`` tells other commands in the same folder which Redis,
Redis namespace and PostgreSQL it uses, so ``speedtier status`` (or ``ready``, ``db current``,
``jobs show``...) needs no exported URLs. The file names the writer's pid and is ignored once
that process is gone.

What a command configures itself wins: a set ``REDIS_URL`` or ``DATABASE_URL`` is kept, and
the namespace is taken from the file only when ``SPEEDTIER_REDIS_NAMESPACE`` is not set and
the command talks to the same Redis as ``up``. Likewise the environment: ``up`` runs as
development, and a command beside it with ``SPEEDTIER_ENV`` unset (which means production)
runs as ``up`` does (:func:`adopt_environment`), so the tour's ``speedtier jobs show`` needs
no production token or key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from shared.config import Settings

FILE_NAME = "runtime.json"
#: ``SPEEDTIER_DATA_DIR``'s default: ``Settings.data_dir``'s, written here too so that a command
#: reads the file without importing the settings model (a test keeps the two equal).
DEFAULT_DATA_DIR = ".speedtier"


class Running(TypedDict):
    """What ``speedtier up`` wrote: its pid's services."""

    redis_url: str
    database_url: str
    redis_namespace: str | None
    environment: str | None


def write(
    data_dir: str,
    *,
    redis_url: str,
    database_url: str,
    redis_namespace: str | None = None,
    environment: str | None = None,
) -> Path:
    path = Path(data_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "pid": os.getpid(),
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": redis_namespace,
        "environment": environment,
    }
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(payload))
    scratch.replace(path)  # a reader never sees half a file
    return path


def remove(data_dir: str) -> None:
    path = Path(data_dir) / FILE_NAME
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def read(data_dir: str) -> Running | None:
    """The services of the ``speedtier up`` running from this folder, or None."""
    try:
        payload = json.loads((Path(data_dir) / FILE_NAME).read_text())
        os.kill(int(payload["pid"]), 0)
        namespace = payload.get("redis_namespace")
        environment = payload.get("environment")
        return Running(
            redis_url=str(payload["redis_url"]),
            database_url=str(payload["database_url"]),
            redis_namespace=str(namespace) if namespace else None,
            environment=str(environment) if environment else None,
        )
    except PermissionError:  # alive, but another user's: its services are not ours to use
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def resolve(settings: Settings) -> Settings:
    """``settings`` completed from the ``speedtier up`` running from its data directory.

    Its Redis and PostgreSQL URLs fill the ones not configured; its Redis namespace replaces
    the default one when ``SPEEDTIER_REDIS_NAMESPACE`` is not set and the Redis is ``up``'s.
    Without a running ``up`` the settings are returned unchanged.
    """
    running = read(settings.data_dir)
    if running is None:
        return settings
    update: dict[str, object] = {}
    if not settings.redis_url:
        update["redis_url"] = running["redis_url"]
    if not settings.database_url:
        update["database_url"] = running["database_url"]
    same_redis = (settings.redis_url or running["redis_url"]) == running["redis_url"]
    namespace_set = "redis_namespace" in settings.model_fields_set
    if running["redis_namespace"] and same_redis and not namespace_set:
        update["redis_namespace"] = running["redis_namespace"]
    return settings.model_copy(update=update) if update else settings


def adopt_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``SPEEDTIER_ENV`` to the running ``up``'s environment when it is unset and an
    ``up`` runs from the data directory (``SPEEDTIER_DATA_DIR``); otherwise change nothing.
    Called before a command reads its settings."""
    env = os.environ if environ is None else environ
    if "SPEEDTIER_ENV" in env:
        return
    running = read(env.get("SPEEDTIER_DATA_DIR") or DEFAULT_DATA_DIR)
    if running is not None and running["environment"]:
        env["SPEEDTIER_ENV"] = running["environment"]


def namespace_for(data_dir: str, prefix: str = "speedtier") -> str:
    """The Redis namespace of one data directory: ``<prefix>-<8 hex of its absolute path>``.

    ``speedtier up`` uses it on a Redis it did not start, so two checkouts (two data
    directories) sharing one Redis never consume each other's queues or leader lock.
    """
    absolute = str(Path(data_dir).expanduser().resolve())
    return f"{prefix}-{hashlib.sha256(absolute.encode()).hexdigest()[:8]}"
