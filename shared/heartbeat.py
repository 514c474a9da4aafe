"""Heartbeat files: a process proves it is alive by touching a file; the liveness probe
(``speedtier alive``) reads the file's age.

A process touches its file only while it is whole (a worker: every consumer and worker
thread running; a pool: every child running and beating), so a wedged or half-dead process
stops beating and the probe fails, while a dependency outage (Redis, PostgreSQL) does not stop
it: that is readiness's business, not liveness's.

Files live in the temporary directory (``TMPDIR``; the chart's ``/tmp`` emptyDir), named
``speedtier-<component>.alive`` (``speedtier-<component>.<pid>.alive`` for a pool's child).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

#: How often a process beats, and how old a beat the probe accepts by default.
BEAT_SECONDS = 5.0
MAX_AGE_SECONDS = 60.0


def heartbeat_path(component: str, pid: int | None = None) -> Path:
    suffix = f".{pid}" if pid is not None else ""
    return Path(tempfile.gettempdir()) / f"speedtier-{component}{suffix}.alive"


def beat(path: Path) -> None:
    """Touch ``path`` (create it on the first beat)."""
    path.touch()
    os.utime(path)


def age(path: Path) -> float | None:
    """Seconds since the last beat, or None when the process never beat."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return None


def is_recent(path: Path, max_age: float = MAX_AGE_SECONDS) -> bool:
    seconds = age(path)
    return seconds is not None and seconds <= max_age


def clear(path: Path) -> None:
    path.unlink(missing_ok=True)
