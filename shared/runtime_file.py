"""Where a running ``speedtier up`` tells other commands in the same folder which Redis and
PostgreSQL it uses, so ``speedtier status`` (or ``jobs show``, ``pause``...) needs no
exported URLs. The file names the writer's pid and is ignored once that process is gone."""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE_NAME = "runtime.json"


def write(data_dir: str, *, redis_url: str, database_url: str) -> Path:
    path = Path(data_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"pid": os.getpid(), "redis_url": redis_url, "database_url": database_url}
    path.write_text(json.dumps(payload))
    return path


def remove(data_dir: str) -> None:
    path = Path(data_dir) / FILE_NAME
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def read(data_dir: str) -> dict[str, str] | None:
    """The URLs of the ``speedtier up`` running from this folder, or None."""
    try:
        payload = json.loads((Path(data_dir) / FILE_NAME).read_text())
        os.kill(int(payload["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {"redis_url": str(payload["redis_url"]), "database_url": str(payload["database_url"])}
